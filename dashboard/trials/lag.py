"""How far the central log reader's data reaches: a trial read from this host's log dirs
is known only up to the start of the last read of them that finished. A read that takes
long (a first ingest of a long history, a slow machine), in this process or another,
leaves every trial's newest results unread: counting their silence to now would call
thousands of them stalled at once. Registered with the trial detectors as a source of
silences (TrialsConfig.ready), as the node agents' is.

The mark is shared by every raywatch process, in the database (models.LogReading), and
outlives them: where several processes take turns reading and each evaluates (a prefork
pool, more than one worker), a mark of each one's own would let one that read long ago
resolve a stall another opened; after a restart, the new process knows where reading
stood. The reader marks where a read begins, shows progress as it stores, and where it
ends; a reader that shows none for SILENCE_HOLD_MAX_S (a hung file system, a process
killed mid-read, reads that fail) holds no stall longer, whichever process it is in.
The stamps are the writing process's clock, compared with the evaluating one's: the
processes that read a host's log dirs run on that host, and so do the workers that
evaluate in docker-compose.yml (more than one host would want the database's clock)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from dashboard.cluster.models import settings_cluster_pk
from dashboard.trials.detect import SILENCE_HOLD_MAX_S
from dashboard.trials.models import LogReading, Trial

PROGRESS_EVERY_S = 10.0  # a long read's sign of life: one row's update this often at most


def _mark(**fields: Any) -> None:
    if not LogReading.objects.filter(pk=LogReading.ONLY).update(**fields):
        LogReading.objects.update_or_create(pk=LogReading.ONLY, defaults=fields)


@contextmanager
def reading(started: datetime) -> Iterator[Callable[[], None]]:
    """This process reads the log dirs from `started` (and holds the reader's lock):
    yields progress(), to call as it goes; marks the read finished when the block ends.

    An unfinished read is not forgotten: while none ever finished (a first ingest that
    failed, or whose process was killed, and is read again), the trials stay held where
    the first one began. A read that fails shows no progress, and nor does the next one
    until it has some of its own: reads that keep failing, however often they begin,
    hold nothing longer than SILENCE_HOLD_MAX_S."""
    before = LogReading.objects.filter(pk=LogReading.ONLY).first()
    begun: dict[str, Any] = {}
    if before is None or before.reading_since is None:
        begun["reading_since"] = started
    if before is None or before.reading_since is None or before.progress_at is not None:
        begun["progress_at"] = started  # the last read did not fail: this one is news
    if begun:
        _mark(**begun)
    shown = [started]

    def progress() -> None:
        now = timezone.now()
        if (now - shown[0]).total_seconds() >= PROGRESS_EVERY_S:
            shown[0] = now
            _mark(progress_at=now)

    try:
        yield progress
    except BaseException:
        with contextlib.suppress(DatabaseError):  # the error that ended the read is told
            _mark(progress_at=None)
        raise
    _mark(read_from=started, read_ended=timezone.now(), reading_since=None,
          progress_at=None)


def behind_s() -> float:
    """How long the reader may be behind before stalls wait for it: a few polls."""
    return max(3 * settings.POLL_LOGS_S, 10.0)


def reader_lag(trials: list[Trial], now: datetime) -> dict[int, dict[str, Any]]:
    """The trials of the reader's cluster, held at its data while it lags."""
    if not settings.CENTRAL_LOGS or not trials:
        return {}
    mark = LogReading.objects.filter(pk=LogReading.ONLY).first()
    until = mark and (mark.read_from or mark.reading_since)
    if until is None:
        return {}  # nothing read, nor reading: nothing to wait for
    behind = (now - until).total_seconds()
    if behind <= behind_s():
        return {}
    # Held where the last finished read began (or the first read, while none finished)
    # as long as the reader shows a sign of life: a read ending, or one in progress
    # storing what it reads, here or in another process. A reader that shows none (a
    # hung file system, a process killed mid-read, reads that fail, polls that stopped)
    # holds the clock SILENCE_HOLD_MAX_S at most.
    alive = max((t for t in (mark.read_ended, mark.progress_at) if t), default=until)
    quiet = (now - alive).total_seconds()
    if quiet < SILENCE_HOLD_MAX_S:
        held = {"data_until": until, "agent_note": (
            f"raywatch's log reader is {behind:.0f} s behind the log dirs (a long first "
            "ingest, another raywatch process reading, or a slow machine): this trial's "
            f"silence is counted up to {timezone.localtime(until):%H:%M:%S}, what was read")}
    elif mark.reading_since:
        held = {"agent_note": (
            f"raywatch's log reader has shown no progress for {quiet:.0f} s (a read of the "
            f"log dirs begun {timezone.localtime(mark.reading_since):%Y-%m-%d %H:%M:%S} "
            "hung, failed, or its process is gone): this trial's silence is counted to now")}
    else:
        held = {"agent_note": f"raywatch's log reader has finished no read of the log dirs "
                              f"for {quiet:.0f} s: this trial's silence is counted to now"}
    cluster = settings_cluster_pk()
    return {t.pk: held for t in trials if t.experiment.cluster_id == cluster}
