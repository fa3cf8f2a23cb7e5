"""A stalled trial's Python stack: asked for (when its trial_stalled incident opens, or by
an operator), taken in the background by the best source (probes.stack_of), stored, and
shown on the trial's page and in its incident's details.

Asking only writes a row and, after the commit, hands the work to a worker (or the
embedded pool): the detector's poll never waits on py-spy, an agent or Ray.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from dashboard.core import audit
from dashboard.core.background import send_soon
from dashboard.core.push import publish, trial_group
from dashboard.trials.models import Trial, TrialStack
from dashboard.trials.probes import Stack, stack_of
from dashboard.trials.runs import is_run

log = logging.getLogger(__name__)
TAKE_TASK = "dashboard.trials.tasks.take_trial_stack"
DETECTOR = "the stall detector"


def request_stack(trial: Trial, now: datetime, user: Any = None,
                  address: str = "") -> tuple[TrialStack, bool]:
    """(the stack row, True if this call asked for it). A stack of the trial still being
    taken is returned instead of asking twice."""
    waiting = (TrialStack.objects.filter(trial=trial, state=TrialStack.PENDING,
                                         requested_at__gt=now - give_up_after())
               .order_by("-requested_at").first())
    if waiting is not None:
        return waiting, False
    who = user.get_username() if user is not None else ""
    with transaction.atomic():
        stack = TrialStack.objects.create(
            trial=trial, pid=trial.pid, node_ip=trial.node_ip, hostname=trial.hostname,
            requested_at=now, requested_by=who, address=address[:64])
        if user is not None:  # a person's request: py-spy on a node is theirs to answer for
            audit.record(audit.Act(
                audit.TAKE_STACK, f"trial:{trial.experiment.name}/{trial.trial_id}", now,
                user, address, f"of pid {trial.pid} on {trial.hostname or trial.node_ip}",
                target={"pid": trial.pid, "node_ip": trial.node_ip,
                        "hostname": trial.hostname, "stack": stack.pk}))
        transaction.on_commit(lambda: send_soon(TAKE_TASK, take, stack.pk, expires=60,
                                                  queue=settings.STACKS_QUEUE))
    log.warning("stack of trial %s (pid %s on %s) asked by %s%s", trial, trial.pid,
                trial.node_ip or trial.hostname, who or DETECTOR,
                f" from {address}" if address else "")
    return stack, True


def take(pk: int) -> None:
    """Take the stack (in a worker); store what came, or why nothing did; tell the page."""
    stack = TrialStack.objects.select_related("trial").filter(pk=pk).first()
    if stack is None or stack.state != TrialStack.PENDING:
        return
    found = stack_of(stack.trial)
    if isinstance(found, Stack):
        fields = {"state": TrialStack.TAKEN, "source": found.source, "text": found.text,
                  "reason": "; ".join(found.tried), "samples": found.samples,
                  "hung": found.hung, "frame": found.frame, "waits_on": found.waits_on,
                  "verdict": found.verdict}
    else:
        fields = {"state": TrialStack.FAILED, "reason": found}
    with transaction.atomic():
        TrialStack.objects.filter(pk=pk, state=TrialStack.PENDING).update(
            taken_at=timezone.now(), **fields)
        publish(trial_group(stack.trial_id), "stack",
                lambda: stack_payload(TrialStack.objects.get(pk=pk)))


def give_up_after() -> timedelta:
    return timedelta(seconds=settings.STACK_GIVE_UP_S)


def stack_payload(stack: TrialStack | None, now: datetime | None = None) -> dict[str, Any] | None:
    """What a page, the API and an incident's details show of a stack."""
    if stack is None:
        return None
    state, reason = stack.state, stack.reason
    if state == TrialStack.PENDING and (now or timezone.now()) - stack.requested_at \
            > give_up_after():
        state, reason = TrialStack.FAILED, (
            f"no answer within {settings.STACK_GIVE_UP_S:g} s: the worker taking it stopped?")
    return {"id": stack.pk, "state": state, "source": stack.source, "text": stack.text,
            "reason": reason, "pid": stack.pid, "where": stack.node_ip or stack.hostname,
            "requested_at": stack.requested_at.isoformat(),
            "requested_by": stack.requested_by or DETECTOR,
            "taken_at": stack.taken_at.isoformat() if stack.taken_at else None,
            "samples": stack.samples, "hung": stack.hung, "frame": stack.frame,
            "waits_on": stack.waits_on, "verdict": stack.verdict}


def latest_stack(trial: Trial) -> TrialStack | None:
    return TrialStack.objects.filter(trial=trial).order_by("-requested_at", "-id").first()


def quiet_since(trial: Trial) -> datetime | None:
    """Since when a trial has been silent: its last result; for an RL run that has printed
    no step yet, since raywatch found it (its trainer listed by Ray)."""
    if trial.last_result_at is not None:
        return trial.last_result_at
    return trial.first_seen_at if is_run(trial) else None


def stacks_of_stalls(trials: list[Trial]) -> dict[int, TrialStack]:
    """Each stalled trial's newest stack asked for since its last result: the stack of
    this stall (one query)."""
    since = {t.pk: at for t in trials if (at := quiet_since(t))}
    if not since:
        return {}
    rows = TrialStack.objects.filter(trial_id__in=since, requested_at__gte=min(since.values())
                                     ).order_by("requested_at", "id")
    return {row.trial_id: row for row in rows if row.requested_at >= since[row.trial_id]}
