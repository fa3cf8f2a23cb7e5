"""Actions that nothing will finish: one no executor took in time (its worker was down,
its queue was lost), or one whose executor stopped mid-way (a restart, a crash). Each
ends failed with an audited outcome that says what is known, so its target is free to be
acted on again; and an executor that takes an action late does not run it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from dashboard.actions.audit import step
from dashboard.actions.models import AuditEntry

TUNE_VERDICT_S = 20.0  # executor.tune_outcome's wait, after the action succeeded


def queue_limit() -> timedelta:
    return timedelta(seconds=settings.ACTION_QUEUE_S)


def run_limit() -> timedelta:
    """The longest an executor takes from its claim to the end: SIGTERM (an agent has a
    command's life to answer), the grace period, the forced kill (as long again), the wait
    for it, and a margin."""
    return timedelta(seconds=2 * settings.AGENT_COMMAND_TTL_S + settings.TERMINATE_GRACE_S
                     + settings.FORCE_WAIT_S + TUNE_VERDICT_S + 30)


def late(entry: AuditEntry, now: datetime) -> bool:
    """Taken too long after it was asked for: not run."""
    return now - entry.requested_at > queue_limit()


def settle(now: datetime, target_key: str | None = None) -> int:
    """End the overdue actions (of one target, when given); how many were ended."""
    overdue = AuditEntry.objects.filter(state__in=AuditEntry.ACTIVE)
    if target_key is not None:
        overdue = overdue.filter(target_key=target_key)
    ended = 0
    for entry in overdue:
        if (why := overdue_because(entry, now)) and ends(entry, now, why):
            ended += 1
    return ended


def overdue_because(entry: AuditEntry, now: datetime) -> str | None:
    if entry.started_at is None:
        if not late(entry, now):
            return None
        return (f"no executor took the action within {settings.ACTION_QUEUE_S:g} s (its "
                "worker was down or restarted): nothing was signalled; ask again if it is "
                "still needed")
    if now - entry.started_at <= run_limit():
        return None
    last = entry.steps.order_by("-at", "-id").first()
    done = f"; the last step recorded was {last.step} at {last.at:%H:%M:%S} UTC" if last else ""
    sent = (" A signal was sent: whether the target ended is not known, check it before "
            "acting again." if entry.state == AuditEntry.SIGNALLED else
            " Whether anything was signalled is not known.")
    return (f"the executor stopped mid-action (a restart or crash) and did not finish it "
            f"within {run_limit().total_seconds():g} s{done}.{sent}")


def ends(entry: AuditEntry, now: datetime, why: str) -> bool:
    """Fail the action unless its executor moved it on meanwhile."""
    if not AuditEntry.objects.filter(pk=entry.pk, state=entry.state).update(
            state=AuditEntry.FAILED, outcome=why, finished_at=now):
        return False
    entry.state, entry.outcome, entry.finished_at = AuditEntry.FAILED, why, now
    step(entry, AuditEntry.FAILED, now, why)
    return True
