"""Roll raw GPU samples up into per-minute rows, and prune both on schedule.

Every completed minute is rolled up as it passes (re-rolling the last few minutes
to take in late samples), so charts of days read rollups while raw samples are
still there. Raw rows older than RAYWATCH_RAW_RETENTION_H that have been rolled
up, and rollups older than RAYWATCH_ROLLUP_RETENTION_D, are deleted in batches of
rows by primary key: short transactions and row locks, never a table-wide lock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, Max, Min, Model, QuerySet
from django.db.models.functions import TruncMinute

from dashboard.gpus.models import GpuRollup, GpuSample, RollupState

LATENESS = timedelta(seconds=15)  # a minute is rolled up once its samples are in
REROLL = timedelta(minutes=3)  # and rolled again for a while, for late samples
CHUNK = timedelta(hours=1)  # a catch-up after downtime goes an hour at a time
AGGREGATES = {
    "samples": Count("id"),
    "utilization_min": Min("utilization_gpu"), "utilization_mean": Avg("utilization_gpu"),
    "utilization_max": Max("utilization_gpu"),
    "memory_min": Min("memory_used_bytes"), "memory_mean": Avg("memory_used_bytes"),
    "memory_max": Max("memory_used_bytes"),
    "temperature_min": Min("temperature_c"), "temperature_mean": Avg("temperature_c"),
    "temperature_max": Max("temperature_c"),
    "power_min": Min("power_w"), "power_mean": Avg("power_w"), "power_max": Max("power_w"),
}


def floor_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def roll_up(now: datetime) -> int:
    """Roll up every completed minute not yet rolled up; returns rollup rows written."""
    upto = floor_minute(now - LATENESS)
    state = RollupState.objects.filter(name="gpu").first()
    if state is None:
        oldest = GpuSample.objects.order_by("at").values_list("at", flat=True).first()
        if oldest is None:
            return 0
        state = RollupState.objects.create(name="gpu", done_until=floor_minute(oldest))
    start = max(state.done_until - REROLL, _oldest_raw(state.done_until - REROLL))
    written = 0
    while start < upto:
        end = min(start + CHUNK, upto)
        written += _roll_up_range(start, end)
        RollupState.objects.filter(pk=state.pk).update(done_until=max(end, state.done_until))
        start = end
    return written


def _oldest_raw(default: datetime) -> datetime:
    oldest = GpuSample.objects.filter(at__gte=default).order_by("at").values_list(
        "at", flat=True).first()
    return floor_minute(oldest) if oldest else default


def _roll_up_range(start: datetime, end: datetime) -> int:
    groups = (
        GpuSample.objects.filter(at__gte=start, at__lt=end)
        .annotate(m=TruncMinute("at")).values("gpu_id", "m").annotate(**AGGREGATES)
        .order_by()
    )
    rows = [GpuRollup(gpu_id=g.pop("gpu_id"), minute=g.pop("m"), **g) for g in groups]
    with transaction.atomic():
        GpuRollup.objects.bulk_create(
            rows, batch_size=2000, update_conflicts=True, unique_fields=["gpu", "minute"],
            update_fields=list(AGGREGATES),
        )
    return len(rows)


def prune(now: datetime) -> dict[str, int]:
    rolled = RollupState.objects.filter(name="gpu").values_list("done_until", flat=True).first()
    raw_cutoff = now - timedelta(hours=settings.RAW_RETENTION_H)
    rollup_cutoff = now - timedelta(days=settings.ROLLUP_RETENTION_D)
    return {
        # Never drop what is not rolled up yet.
        "samples": delete_in_batches(GpuSample, "at", min(raw_cutoff, rolled))
        if rolled else 0,
        "rollups": delete_in_batches(GpuRollup, "minute", rollup_cutoff),
    }


def delete_in_batches(model: type[Model], column: str, cutoff: datetime,
                      batch: int | None = None, among: QuerySet | None = None) -> int:
    """Delete the rows (of `among`, default all) older than `cutoff` by `column`, a batch
    at a time: short transactions, no table lock."""
    batch = batch or settings.RETENTION_BATCH
    rows = among if among is not None else model.objects.all()
    deleted = 0
    while True:
        ids = list(rows.filter(**{f"{column}__lt": cutoff}).order_by()
                   .values_list("id", flat=True)[:batch])
        if not ids:
            return deleted
        deleted += model.objects.filter(id__in=ids).delete()[0]
