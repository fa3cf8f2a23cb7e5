"""Every action goes through `request()`: permission first, then the target as it is
now (a changed target is refused), one active action per target (a double click
returns the same action), a per-user rate limit, a reachability check (503 when
Ray or the node cannot be reached, nothing recorded or signalled), then the audit
entry, and only after it commits, the work (executor.py) in the background."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from dashboard.actions import executor
from dashboard.actions.audit import step
from dashboard.actions.models import AuditEntry
from dashboard.actions.targets import TargetError
from dashboard.core.background import send_soon
from dashboard.core.errors import ApiError
from dashboard.core.roles import has_role


@dataclass(frozen=True)
class Plan:
    """A resolved request: the target as it is now, ready to be recorded and run."""

    kind: str
    key: str
    target: dict[str, Any]
    role: str  # the role needed
    reachable: Callable[[], str | None]  # None, or why Ray/the node cannot be reached


class ActionRefused(ApiError):
    """A request to act that is refused: no role, no reason, a stale target, the rate
    limit, Ray or the node unreachable."""


def request(user: Any, plan_of: Callable[[], Plan], reason: str, address: str,
            now: datetime, needed: str) -> tuple[AuditEntry, bool]:
    """(the action, True if this request created it). Raises ActionRefused."""
    if not has_role(user, needed):
        raise ActionRefused(f"this needs the {needed} role", 403)
    if not reason.strip():
        raise ActionRefused("say why (a reason is required; it goes into the audit)", 400)
    try:
        plan = plan_of()
    except TargetError as exc:
        raise ActionRefused(exc.message, exc.status) from None
    if not has_role(user, plan.role):
        raise ActionRefused(f"this target needs the {plan.role} role", 403)
    if existing := active(plan.key):
        return existing, False
    recent = AuditEntry.objects.filter(
        user=user, requested_at__gte=now - timedelta(seconds=settings.ACTION_RATE_WINDOW_S))
    if recent.count() >= settings.ACTION_RATE:
        raise ActionRefused(f"too many actions: at most {settings.ACTION_RATE} per "
                            f"{settings.ACTION_RATE_WINDOW_S:g} s per user", 429)
    if problem := plan.reachable():
        raise ActionRefused(f"cannot act now: {problem}", 503)
    try:
        with transaction.atomic():
            entry = AuditEntry.objects.create(
                kind=plan.kind, target_key=plan.key, target=plan.target, user=user,
                username=user.get_username(), address=address[:64], reason=reason.strip(),
                requested_at=now)
            step(entry, AuditEntry.REQUESTED, now, f"by {entry.username} from {address}: "
                                                   f"{entry.reason}")
            transaction.on_commit(lambda: start(entry.pk))
    except IntegrityError:  # a concurrent request for the same target won
        if existing := active(plan.key):
            return existing, False
        raise
    return entry, True


def active(key: str) -> AuditEntry | None:
    return AuditEntry.objects.filter(target_key=key, state__in=AuditEntry.ACTIVE).first()


def start(entry_id: int) -> None:
    """Run the action in a worker, sent by task name (tasks.py imports the executor, not
    the other way round), or in this process's background pool on the embedded default."""
    send_soon(executor.RUN_ACTION, executor.run, entry_id, expires=3600)  # routed to notify
