"""How far the central log reader's data reaches: a trial read from this host's log dirs
is known only up to the start of the last poll that read them. A poll that takes long (a
first ingest of a long history, a slow machine) or one left to another process that is
still reading, leaves every trial's newest results unread: counting their silence to now
would call thousands of them stalled at once. Registered with the trial detectors as a
source of silences (TrialsConfig.ready), as the node agents' is."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from dashboard.cluster.models import settings_cluster_pk
from dashboard.trials.detect import SILENCE_HOLD_MAX_S
from dashboard.trials.models import Trial


@dataclass(frozen=True)
class _Mark:
    until: datetime  # when the newest poll that read the log dirs began
    ended: datetime | None  # when it ended, the reader's last sign of progress (None: none)
    others: bool  # another process holds the reading now


_mark: list[_Mark] = []  # this process's, once it read or found another reading


def note_read(started: datetime) -> None:
    """This process's poll that began at `started` read the log dirs to the end (now)."""
    _mark[:] = [_Mark(started, timezone.now(), others=False)]


def note_busy(at: datetime) -> None:
    """Another process is reading the log dirs: what this one knows ends here."""
    _mark[:] = [replace(_mark[0], others=True) if _mark else _Mark(at, None, others=True)]


def forget() -> None:
    """As a new process: nothing read yet (tests: each starts with a reader of its own)."""
    _mark.clear()


def behind_s() -> float:
    """How long the reader may be behind before stalls wait for it: a few polls."""
    return max(3 * settings.POLL_LOGS_S, 10.0)


def reader_lag(trials: list[Trial], now: datetime) -> dict[int, dict[str, Any]]:
    """The trials of the reader's cluster, held at its data while it lags."""
    if not settings.CENTRAL_LOGS or not _mark:
        return {}
    mark = _mark[0]
    behind = (now - mark.until).total_seconds()
    if behind <= behind_s():
        return {}
    # A read that took long (a first ingest) holds the clock to where it began until the
    # next one; reads that stop ending (a hung file system) hold it SILENCE_HOLD_MAX_S
    # at most. Another process's reading is waited for: it ends by itself.
    stuck = (now - mark.ended).total_seconds() if mark.ended and not mark.others else 0.0
    if stuck < SILENCE_HOLD_MAX_S:
        held = {"data_until": mark.until, "agent_note": (
            f"raywatch's log reader is {behind:.0f} s behind the log dirs (a long first "
            "ingest, or a slow machine): its silence is counted to what was read")}
    else:
        held = {"agent_note": f"raywatch's log reader has finished no read of the log dirs "
                              f"for {stuck:.0f} s: its silence is counted to now"}
    cluster = settings_cluster_pk()
    return {t.pk: held for t in trials if t.experiment.cluster_id == cluster}
