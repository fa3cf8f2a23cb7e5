"""A GPU's history as a chart: at most `points` buckets per series, aggregated in the
database so that a week of 1 Hz samples never crosses the wire.

Buckets of a minute or more read the per-minute rollups (plus raw samples newer than
the last rollup); finer buckets read raw samples, which are kept long enough
(RAYWATCH_RAW_RETENTION_H) for the widest chart that needs them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from dashboard.gpus.models import GpuRollup, GpuSample, RollupState

MAX_POINTS = 2000
ROLLUP_S = 60
# In the order of the queries' columns.
SERIES = ("utilization_min", "utilization", "utilization_max", "memory_used",
          "memory_used_max", "temperature", "power")

RAW_SQL = """
SELECT {bucket} AS t, min(utilization_gpu), avg(utilization_gpu), max(utilization_gpu),
       avg(memory_used_bytes), max(memory_used_bytes), avg(temperature_c), avg(power_w),
       count(*)
FROM {table} WHERE gpu_id = %s AND at >= %s AND at < %s GROUP BY 1 ORDER BY 1
"""
ROLLUP_SQL = """
SELECT {bucket} AS t, min(utilization_min), {wavg_util}, max(utilization_max),
       {wavg_memory}, max(memory_max), {wavg_temperature}, {wavg_power}, sum(samples)
FROM {table} WHERE gpu_id = %s AND minute >= %s AND minute < %s GROUP BY 1 ORDER BY 1
"""


@dataclass(frozen=True)
class Chart:
    since: datetime
    until: datetime
    bucket_s: int
    source: str  # "raw" or "rollup"
    rows: list[tuple]

    def as_dict(self) -> dict[str, Any]:
        columns: dict[str, list[Any]] = {"t": [], **{name: [] for name in SERIES}}
        for row in self.rows:
            columns["t"].append(datetime.fromtimestamp(row[0], tz=UTC).isoformat())
            for name, value in zip(SERIES, row[1:8], strict=True):
                columns[name].append(None if value is None else round(float(value), 2))
        return {"since": self.since.isoformat(), "until": self.until.isoformat(),
                "bucket_s": self.bucket_s, "source": self.source,
                "points": len(self.rows), "series": columns}


def bucket_seconds(since: datetime, until: datetime, points: int) -> int:
    span = max((until - since).total_seconds(), 1.0)
    # One bucket fewer than asked: an unaligned `since` adds a partial bucket at each end.
    bucket = max(1, math.ceil(span / max(1, min(points, MAX_POINTS) - 1)))
    if bucket >= ROLLUP_S:
        bucket = math.ceil(bucket / ROLLUP_S) * ROLLUP_S  # whole minutes: rollups align
    return bucket


def gpu_chart(gpu_pk: int, since: datetime, until: datetime, points: int = MAX_POINTS) -> Chart:
    bucket = bucket_seconds(since, until, points)
    if bucket < ROLLUP_S:
        return Chart(since, until, bucket, "raw", _raw(gpu_pk, since, until, bucket))
    rolled = RollupState.objects.filter(name="gpu").values_list("done_until", flat=True).first()
    # Rollups cover whole minutes: the part of the first minute after `since`, and
    # everything after the last rollup, come from raw samples.
    head = min(since.replace(second=0, microsecond=0) + timedelta(minutes=1), until)
    split = min(max(rolled or head, head), until)
    rows = _raw(gpu_pk, since, head, bucket) if since < head else []
    if split > head:
        rows = _merge(rows, _rollup(gpu_pk, head, split, bucket))
    if split < until:
        rows = _merge(rows, _raw(gpu_pk, split, until, bucket))
    return Chart(since, until, bucket, "rollup", rows)


def _raw(gpu_pk: int, since: datetime, until: datetime, bucket: int) -> list[tuple]:
    sql = RAW_SQL.format(bucket=_bucket_expr("at", bucket), table=GpuSample._meta.db_table)
    return _fetch(sql, [gpu_pk, _as_stored(since), _as_stored(until)])


def _rollup(gpu_pk: int, since: datetime, until: datetime, bucket: int) -> list[tuple]:
    sql = ROLLUP_SQL.format(
        bucket=_bucket_expr("minute", bucket), table=GpuRollup._meta.db_table,
        wavg_util=_weighted("utilization_mean"), wavg_memory=_weighted("memory_mean"),
        wavg_temperature=_weighted("temperature_mean"), wavg_power=_weighted("power_mean"),
    )
    return _fetch(sql, [gpu_pk, _as_stored(since), _as_stored(until)])


def _weighted(column: str) -> str:
    return (f"sum({column} * samples) / "
            f"nullif(sum(CASE WHEN {column} IS NULL THEN 0 ELSE samples END), 0)")


def _bucket_expr(column: str, bucket: int) -> str:
    if connection.vendor == "postgresql":
        return f"(floor(extract(epoch from {column}) / {bucket}) * {bucket})::bigint"
    # '%%s': Django's SQLite cursor reads a bare %s as a query parameter.
    return f"(CAST(strftime('%%s', {column}) AS INTEGER) / {bucket}) * {bucket}"


def _as_stored(at: datetime) -> Any:
    # Raw SQL skips the ORM's conversion: SQLite stores naive UTC text, and compares text.
    return connection.ops.adapt_datetimefield_value(at)


def _fetch(sql: str, params: list[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(row) for row in cursor.fetchall()]


def _merge(rolled: list[tuple], raw: list[tuple]) -> list[tuple]:
    """Join two consecutive parts of a chart; a bucket split between them is combined."""
    if not rolled or not raw or rolled[-1][0] != raw[0][0]:
        return rolled + raw
    a, b = rolled[-1], raw[0]
    n_a, n_b = a[8] or 0, b[8] or 0

    def mean(i: int) -> float | None:
        pairs = [(v, n) for v, n in ((a[i], n_a), (b[i], n_b)) if v is not None and n]
        total = sum(n for _, n in pairs)
        return sum(float(v) * n for v, n in pairs) / total if total else None

    def pick(fn: Any, i: int) -> Any:
        values = [v for v in (a[i], b[i]) if v is not None]
        return fn(values) if values else None

    combined = (a[0], pick(min, 1), mean(2), pick(max, 3), mean(4), pick(max, 5), mean(6),
                mean(7), n_a + n_b)
    return [*rolled[:-1], combined, *raw[1:]]
