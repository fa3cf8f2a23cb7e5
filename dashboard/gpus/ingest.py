"""Store NVML polls: the GPUs' latest readings, their processes, and the raw samples
(COPY on Postgres, one multi-row INSERT elsewhere).

The agents of a whole cluster write here about once a second per GPU, so the polls of
any number of nodes (an agent's report may carry several) are one transaction of a
handful of statements whatever their number (bench/ingest_bench.py and
bench/gpu_bench.py measure it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from collectors.records import GpuPoll, GpuSampleRecord
from dashboard.core.bulk import upsert
from dashboard.core.push import GPUS_GROUP, publish
from dashboard.gpus.models import Gpu, GpuProcess, GpuSample

SAMPLE_COLUMNS = (
    "gpu_id", "at", "utilization_gpu", "utilization_memory", "memory_used_bytes",
    "temperature_c", "power_w", "sm_clock_mhz",
)
GONE_AT_ONCE = 200  # processes deleted by one statement (SQLite limits an expression's depth)
LATEST_FIELDS = (
    "node", "node_ip", "index", "name", "simulated", "at", "utilization_gpu",
    "utilization_memory", "memory_used_bytes", "memory_total_bytes", "temperature_c",
    "power_w", "power_limit_w", "sm_clock_mhz", "memory_clock_mhz", "throttle_reasons",
    "ecc_corrected", "ecc_uncorrected", "mig_mode",
)


def ingest_gpu_poll(poll: GpuPoll, node_ip: str, now: datetime) -> list[Gpu]:
    """Store a poll; returns the node's GPU rows as updated."""
    return ingest_gpu_polls([(poll, node_ip)], now)


def ingest_gpu_polls(polls: Sequence[tuple[GpuPoll, str]], now: datetime) -> list[Gpu]:
    """Store the polls of any number of nodes, several of one node too (an agent's
    report after an outage, an agent that sends every few seconds): one transaction of
    the same handful of statements whatever their number (bench/gpu_bench.py). A GPU's
    latest reading is its newest sample's; every sample is appended; a node's processes
    are its newest poll's. Returns the GPU rows as updated, by node then index."""
    polls = sorted(polls, key=lambda p: p[0].at)  # oldest first: the newest wins
    if not any(poll.gpus for poll, _ in polls):
        return []
    with transaction.atomic():
        gpus = _upsert_gpus(polls, now)
        by_uuid = {g.uuid: g for g in gpus}
        write_gpu_samples([(by_uuid[r.uuid].pk, r) for poll, _ in polls for r in poll.gpus])
        newest = {poll.node: poll for poll, _ in polls}
        _replace_processes(list(newest.values()), by_uuid, now)
        # The tiles are built after commit, so a page never shows what rolled back; from
        # the rows as written (reading 1,024 of them back cost a third of a call).
        publish(GPUS_GROUP, "gpus", partial(_tiles, gpus))
    return gpus


def _tiles(gpus: list[Gpu]) -> dict:
    """Tiles for the given GPUs, built when the push is sent (after commit)."""
    from dashboard.gpus.views_data import gpu_payload

    return {"gpus": gpu_payload(gpus)}


def _upsert_gpus(polls: Sequence[tuple[GpuPoll, str]], now: datetime) -> list[Gpu]:
    """One INSERT ... ON CONFLICT for every GPU of the polls (bulk_update's CASE per field
    and row cost ~6x more CPU per poll: bench/gpu_bench.py). Each GPU's samples are
    applied oldest first: its idle and memory-high stretches carry across them."""
    held = _since([r.uuid for poll, _ in polls for r in poll.gpus])
    rows: dict[str, Gpu] = {}
    for poll, node_ip in polls:
        for record in poll.gpus:
            gpu = rows.get(record.uuid)
            if gpu is None:
                gpu = rows[record.uuid] = Gpu(uuid=record.uuid, first_seen_at=now)
                gpu.idle_since, gpu.memory_high_since = held.get(record.uuid, (None, None))
            _apply(gpu, record, node_ip)
    upsert(Gpu, list(rows.values()), ["uuid"], [*LATEST_FIELDS, "idle_since",
                                                "memory_high_since"])
    if any(g.pk is None for g in rows.values()):  # backends that return no ids from an upsert
        ids = dict(Gpu.objects.filter(uuid__in=list(rows)).values_list("uuid", "pk"))
        for gpu in rows.values():
            gpu.pk = ids[gpu.uuid]
    return sorted(rows.values(), key=lambda g: (g.node, g.index))


def _since(uuids: list[str]) -> dict[str, tuple]:
    """When each GPU's idle / memory-high stretch began, as stored."""
    return {uuid: (idle, high) for uuid, idle, high in Gpu.objects.filter(
        uuid__in=uuids).values_list("uuid", "idle_since", "memory_high_since")}


def _apply(gpu: Gpu, r: GpuSampleRecord, node_ip: str) -> None:
    values = {
        "node": r.node, "node_ip": node_ip, "index": r.gpu_index, "name": r.name or "",
        "simulated": r.simulated, "at": r.at, "utilization_gpu": r.utilization_gpu,
        "utilization_memory": r.utilization_memory, "memory_used_bytes": r.memory_used_bytes,
        "memory_total_bytes": r.memory_total_bytes, "temperature_c": r.temperature_c,
        "power_w": r.power_w, "power_limit_w": r.power_limit_w, "sm_clock_mhz": r.sm_clock_mhz,
        "memory_clock_mhz": r.memory_clock_mhz,
        "throttle_reasons": list(r.throttle_reasons) if r.throttle_reasons is not None else None,
        "ecc_corrected": r.ecc_corrected, "ecc_uncorrected": r.ecc_uncorrected,
        "mig_mode": r.mig_mode,
    }
    for field, value in values.items():
        setattr(gpu, field, value)
    idle = r.utilization_gpu is not None and r.utilization_gpu < settings.IDLE_GPU_PERCENT
    gpu.idle_since = (gpu.idle_since or r.at) if idle else None
    gpu.memory_high_since = (gpu.memory_high_since or r.at) if _memory_high(r) else None


def _memory_high(r: GpuSampleRecord) -> bool:
    if not r.memory_total_bytes or r.memory_used_bytes is None:
        return False
    return 100 * r.memory_used_bytes / r.memory_total_bytes > settings.GPU_MEMORY_HIGH_PERCENT


def _replace_processes(polls: Sequence[GpuPoll], by_uuid: dict[str, Gpu], now: datetime
                       ) -> None:
    """Each listed GPU's processes become those of its node's newest poll."""
    listed = {by_uuid[r.uuid].pk: r.processes for poll in polls for r in poll.gpus
              if r.processes is not None}
    if not listed:
        return
    first_seen = {(gpu_pk, pid): at for gpu_pk, pid, at in GpuProcess.objects.filter(
        gpu_id__in=list(listed)).values_list("gpu_id", "pid", "first_seen_at")}
    # One row a (GPU, pid): NVML may list a pid twice (as compute and as graphics).
    by_key = {(gpu_pk, p.pid): GpuProcess(
        gpu_id=gpu_pk, pid=p.pid, type=p.type, used_memory_bytes=p.used_memory_bytes,
        ancestors=list(p.ancestors), last_seen_at=now,
        first_seen_at=first_seen.get((gpu_pk, p.pid), now))
        for gpu_pk, processes in listed.items() for p in processes}
    rows = list(by_key.values())
    seen = set(by_key)
    gone = [key for key in first_seen if key not in seen]
    for start in range(0, len(gone), GONE_AT_ONCE):  # a statement for many, not each
        condition = Q()
        for gpu_pk, pid in gone[start:start + GONE_AT_ONCE]:
            condition |= Q(gpu_id=gpu_pk, pid=pid)
        GpuProcess.objects.filter(condition).delete()
    upsert(GpuProcess, rows, ["gpu", "pid"],
           ["used_memory_bytes", "type", "ancestors", "last_seen_at"])


def _row(gpu_pk: int, r: GpuSampleRecord) -> tuple:
    return (gpu_pk, r.at, r.utilization_gpu, r.utilization_memory, r.memory_used_bytes,
            r.temperature_c, r.power_w, r.sm_clock_mhz)


def write_gpu_samples(rows: Sequence[tuple[int, GpuSampleRecord]]) -> int:
    """Append raw samples, each given with its Gpu row's primary key."""
    if not rows:
        return 0
    if connection.vendor == "postgresql":
        table = GpuSample._meta.db_table
        sql = f"COPY {table} ({', '.join(SAMPLE_COLUMNS)}) FROM STDIN"
        with transaction.atomic(savepoint=False), connection.cursor() as cursor:
            with cursor.cursor.copy(sql) as copy:
                for gpu_pk, record in rows:
                    copy.write_row(_row(gpu_pk, record))
    else:
        GpuSample.objects.bulk_create(
            [GpuSample(**dict(zip(SAMPLE_COLUMNS, _row(pk, r), strict=True))) for pk, r in rows],
            batch_size=500,
        )
    return len(rows)
