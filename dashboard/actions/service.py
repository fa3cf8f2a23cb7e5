"""Every action goes through `request()`: the target as it is now, one active action per
target (a double click returns the same action), then what may refuse it: a per-user
rate limit, the role, a target that changed since the page was drawn, Ray or the node
unreachable (503). A refusal signals nothing and is audited with its reason; an
accepted request is audited, and only after that commits, the work (executor.py) runs
in the background."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from dashboard.actions import executor
from dashboard.actions.audit import advance, step
from dashboard.actions.models import AuditEntry
from dashboard.actions.settle import settle
from dashboard.actions.targets import TargetError
from dashboard.core.background import send_soon
from dashboard.core.errors import ApiError
from dashboard.core.roles import has_role


def _no_check(expected: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True)
class Plan:
    """A resolved request: the target as it is now, ready to be recorded and run."""

    kind: str
    key: str
    target: dict[str, Any]
    role: str  # the role needed
    reachable: Callable[[], str | None]  # None, or why Ray/the node cannot be reached
    # Raises TargetError when the target cannot be acted on as the page showed it
    # (`expected`): it changed, it ended, or it is not ours to end.
    check: Callable[[dict[str, Any]], None] = _no_check


class ActionRefused(ApiError):
    """A request to act that is refused: no role, no reason, a stale target, the rate
    limit, Ray or the node unreachable."""


def request(user: Any, plan_of: Callable[[], Plan], expected: dict[str, Any], reason: str,
            address: str, now: datetime, needed: str) -> tuple[AuditEntry, bool]:
    """(the action, True if this request created it). Raises ActionRefused; a refusal of
    a target that exists is audited first (state "refused", its reason as the outcome)."""
    if not reason.strip():
        raise ActionRefused("say why (a reason is required; it goes into the audit)", 400)
    plan = plan_of()  # TargetError (an ActionRefused's kin) when there is no such target
    settle(now, plan.key)  # an action lost to a restart does not hold its target for ever
    allowed = has_role(user, needed) and has_role(user, plan.role)
    if allowed and (existing := active(plan.key)):
        return existing, False
    if refusal := refused(user, plan, expected, needed, now):
        if not (refusal.status == 429 and rate_refusal_recorded(user, now)):
            record(user, plan, reason, address, now, refusal)
        raise refusal
    try:
        with transaction.atomic():
            entry = record(user, plan, reason, address, now)
            transaction.on_commit(lambda: start(entry))
    except IntegrityError:  # a concurrent request for the same target won
        if existing := active(plan.key):
            return existing, False
        raise
    return entry, True


RATE_LIMITED = "too many actions"


def refused(user: Any, plan: Plan, expected: dict[str, Any], needed: str,
            now: datetime) -> ActionRefused | None:
    """Why this request may not go on, or None. The rate limit comes first and counts
    refused requests too, so a loop of refused requests cannot fill the audit."""
    if len(recent(user, now)) >= settings.ACTION_RATE:
        return ActionRefused(f"{RATE_LIMITED}: at most {settings.ACTION_RATE} per "
                             f"{settings.ACTION_RATE_WINDOW_S:g} s per user", 429)
    for role, what in ((needed, "this"), (plan.role, "this target")):
        if not has_role(user, role):
            return ActionRefused(f"{what} needs the {role} role", 403)
    try:
        plan.check(expected)
    except TargetError as exc:
        return ActionRefused(exc.message, exc.status)
    if problem := plan.reachable():
        return ActionRefused(f"cannot act now: {problem}", 503)
    return None


def recent(user: Any, now: datetime) -> list[tuple[str, str]]:
    """(state, outcome) of the user's requests within the rate window."""
    since = now - timedelta(seconds=settings.ACTION_RATE_WINDOW_S)
    return list(AuditEntry.objects.actions().filter(user=user, requested_at__gte=since)
                .values_list("state", "outcome"))


def rate_refusal_recorded(user: Any, now: datetime) -> bool:
    """One audited rate-limit refusal per window says enough."""
    return any(state == AuditEntry.REFUSED and outcome.startswith(RATE_LIMITED)
               for state, outcome in recent(user, now))


def record(user: Any, plan: Plan, reason: str, address: str, now: datetime,
           refusal: ActionRefused | None = None) -> AuditEntry:
    """The audit entry of a request, as it was asked; refused at once, or requested."""
    ended = ({"state": AuditEntry.REFUSED, "outcome": refusal.message, "finished_at": now}
             if refusal else {})
    entry = AuditEntry.objects.create(
        kind=plan.kind, target_key=plan.key, target=plan.target, user=user,
        username=user.get_username(), address=address[:64], reason=reason.strip(),
        requested_at=now, **ended)
    step(entry, AuditEntry.REQUESTED, now, f"by {entry.username} from {address}: {entry.reason}")
    if refusal:
        step(entry, AuditEntry.REFUSED, now, f"{refusal.message} (HTTP {refusal.status})")
    return entry


def active(key: str) -> AuditEntry | None:
    return AuditEntry.objects.filter(target_key=key, state__in=AuditEntry.ACTIVE).first()


def start(entry: AuditEntry) -> None:
    """Run the action in a worker, sent by task name (tasks.py imports the executor, not
    the other way round), or in this process's background pool on the embedded default.
    When it cannot be sent (the broker is down), the action fails with that reason
    instead of staying "requested" and blocking its target."""
    try:
        send_soon(executor.RUN_ACTION, executor.run, entry.pk,  # to notify
                  expires=settings.ACTION_QUEUE_S)
    except Exception as exc:
        advance(entry, AuditEntry.FAILED, timezone.now(), f"could not start the action: {exc}")
