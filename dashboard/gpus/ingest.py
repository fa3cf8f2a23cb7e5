"""Bulk ingest of GPU samples: COPY on Postgres, one multi-row INSERT elsewhere.

The NVML agents of a whole cluster write here about once a second per GPU, so
this path is kept to one round trip per batch (bench/ingest_bench.py measures
it against raw COPY of the same rows).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, transaction

from collectors.records import GpuSampleRecord
from dashboard.gpus.models import GpuSample

COLUMNS = (
    "node_id", "gpu_index", "gpu_uuid", "at", "utilization_gpu", "utilization_memory",
    "memory_used_bytes", "memory_total_bytes", "temperature_c", "power_w", "power_limit_w",
    "sm_clock_mhz", "simulated",
)


def _row(r: GpuSampleRecord) -> tuple:
    return (
        r.node_id, r.gpu_index, r.uuid, r.at, r.utilization_gpu, r.utilization_memory,
        r.memory_used_bytes, r.memory_total_bytes, r.temperature_c, r.power_w,
        r.power_limit_w, r.sm_clock_mhz, r.simulated,
    )


def write_gpu_samples(records: Sequence[GpuSampleRecord]) -> int:
    if not records:
        return 0
    if connection.vendor == "postgresql":
        table = GpuSample._meta.db_table
        sql = f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN"
        with transaction.atomic(), connection.cursor() as cursor:
            with cursor.cursor.copy(sql) as copy:
                for record in records:
                    copy.write_row(_row(record))
    else:
        GpuSample.objects.bulk_create(
            [GpuSample(**dict(zip(COLUMNS, _row(r), strict=True))) for r in records],
            batch_size=500,
        )
    return len(records)
