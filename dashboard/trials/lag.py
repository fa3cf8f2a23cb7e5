"""How far the central log reader's data reaches: a trial read from this host's log dirs
is known only up to the start of the last read of them that finished. A read that takes
long (a first ingest of a long history, a slow machine), in this process or another,
leaves every trial's newest results unread: counting their silence to now would call
thousands of them stalled at once. Registered with the trial detectors as a source of
silences (TrialsConfig.ready), as the node agents' is.

The mark is shared by every raywatch process, in the database (models.LogReading): a
Celery worker's children take turns reading, and each of them evaluates, so a mark of
each process's own would let a child that read long ago resolve a stall another opened.
The reader marks where a read begins, shows progress as it stores, and where it ends; a
read that shows none for SILENCE_HOLD_MAX_S (a hung file system, a reader killed
mid-way) holds no stall longer, whichever process it is in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from dashboard.cluster.models import settings_cluster_pk
from dashboard.trials.detect import SILENCE_HOLD_MAX_S
from dashboard.trials.models import LogReading, Trial

PROGRESS_EVERY_S = 10.0  # a long read's sign of life: one row's update this often at most


def _mark(**fields: Any) -> None:
    if not LogReading.objects.filter(pk=LogReading.ONLY).update(**fields):
        LogReading.objects.update_or_create(pk=LogReading.ONLY, defaults=fields)


@contextmanager
def reading(started: datetime) -> Iterator[Any]:
    """This process reads the log dirs from `started` (and holds the reader's lock):
    yields progress(), to call as it goes; marks the read finished when the block ends.
    A read that fails marks none: reads that keep failing, however often they begin,
    are no progress."""
    _mark(reading_since=started, progress_at=started)
    shown = [started]

    def progress() -> None:
        now = timezone.now()
        if (now - shown[0]).total_seconds() >= PROGRESS_EVERY_S:
            shown[0] = now
            _mark(progress_at=now)

    try:
        yield progress
    except BaseException:
        _mark(reading_since=None, progress_at=None)
        raise
    _mark(read_from=started, read_ended=timezone.now(), reading_since=None,
          progress_at=None)


def behind_s() -> float:
    """How long the reader may be behind before stalls wait for it: a few polls."""
    return max(3 * settings.POLL_LOGS_S, 10.0)


def reader_lag(trials: list[Trial], now: datetime) -> dict[int, dict[str, Any]]:
    """The trials of the reader's cluster, held at its data while it lags."""
    if not settings.CENTRAL_LOGS:
        return {}
    mark = LogReading.objects.filter(pk=LogReading.ONLY).first()
    until = mark and (mark.read_from or mark.reading_since)
    if until is None:
        return {}  # nothing read, nor reading: nothing to wait for
    behind = (now - until).total_seconds()
    if behind <= behind_s():
        return {}
    # A read that took long (a first ingest) holds the clock to where it began until the
    # next one ends, and one in progress (here or in another process) while it shows
    # progress; a reader that shows none (a hung file system, a process killed mid-read,
    # polls that stopped) holds it SILENCE_HOLD_MAX_S at most.
    alive = max(t for t in (mark.read_ended, mark.progress_at, until) if t)
    quiet = (now - alive).total_seconds()
    if quiet < SILENCE_HOLD_MAX_S:
        held = {"data_until": until, "agent_note": (
            f"raywatch's log reader is {behind:.0f} s behind the log dirs (a long first "
            "ingest, or a slow machine): its silence is counted to what was read")}
    else:
        what = ("has read nothing (a read of the log dirs in progress since "
                f"{timezone.localtime(mark.reading_since):%H:%M:%S})" if mark.reading_since
                else "has finished no read of the log dirs")
        held = {"agent_note": f"raywatch's log reader {what} for {quiet:.0f} s: its "
                              "silence is counted to now"}
    cluster = settings_cluster_pk()
    return {t.pk: held for t in trials if t.experiment.cluster_id == cluster}
