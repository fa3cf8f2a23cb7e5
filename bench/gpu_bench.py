"""GPU history at cluster scale: charts over a week of 1 Hz samples, the sustained write
rate of a 512-GPU cluster's agents, and the cost of pruning raw samples.

1. Chart read-back. A week of 1 Hz samples of 8 GPUs (4.84 million rows) is loaded
   straight into gpus_gpusample and ANALYZEd; `roll_up(now)` then catches up the whole week
   (timed), and `gpu_chart(pk, now - window, now, 2000)` is timed for windows from 7 days
   to 15 minutes. Baselines in the same run: the same week aggregated from the raw table
   (the module's raw query forced onto the 7-day range), and every row of the week for one
   GPU fetched into Python. Target: 7-day chart p95 under 200 ms, <= 2000 points a series.
2. Sustained writes. 64 agents x 8 GPUs: each agent's poll is one `ingest_gpu_poll` with 8
   samples and 1-2 processes per GPU, pushed through the Redis channel layer to a
   subscriber that counts what arrives. Writer processes (each its own connection) go as
   fast as they can; the rate needed is 512 samples/s (1 Hz). Beside it, raw COPY capacity
   measured in the same run with bench/ingest_bench.py's own functions.
3. Pruning. `prune(now)` deletes the 5 days of raw samples older than the 48 h raw
   retention, in batches of RAYWATCH_RETENTION_BATCH rows; the longest batch and the
   longest DELETE (the longest any row lock is held) are printed.

The database is this run's own (created, then dropped at the end); Redis is db 13 unless
BENCH_REDIS_URL says otherwise, under a channel prefix of this run's own. Prints figures;
the exit status says only whether the benchmark itself worked. About 5 minutes on 2 cores.

    .venv/bin/python bench/gpu_bench.py
    .venv/bin/python bench/gpu_bench.py --smoke   # 3 h of 1 GPU, 4 agents for 2 s
    # overrides: BENCH_DATABASE_URL (its server), BENCH_REDIS_URL, BENCH_WORKERS,
    #            BENCH_WRITE_S, BENCH_CHART_READS
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import random
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from multiprocessing.connection import Connection
from typing import Any

import harness
import ingest_bench

from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"
NOISE = ("2 cores shared with other engineers' test runs: expect tens of percent of noise "
         "between runs")

# Smoke: 3 h of one GPU and a raw retention of 1 h (SMOKE_ENV), so rollups, charts and a
# prune all still run.
WEEK = harness.sized(timedelta(days=7), timedelta(hours=3))
SMOKE_ENV = {"RAYWATCH_RAW_RETENTION_H": "1", "RAYWATCH_RETENTION_BATCH": "1000"}
WEEK_GPUS = harness.sized(8, 1)
POINTS = 2000
WINDOWS = (("7 d", WEEK), ("24 h", timedelta(hours=24)), ("6 h", timedelta(hours=6)),
           ("1 h", timedelta(hours=1)), ("15 min", timedelta(minutes=15)))
CHART_READS = int(os.environ.get("BENCH_CHART_READS", harness.sized("50", "3")))
NAIVE_RUNS, FETCH_RUNS = harness.sized(3, 1), 1
TARGET_CHART_P95_MS = 200.0

AGENTS, GPUS_PER_AGENT = harness.sized(64, 4), 8
WORKERS = int(os.environ.get("BENCH_WORKERS", harness.sized("4", "1")))
WRITE_S = float(os.environ.get("BENCH_WRITE_S", harness.sized("20", "2")))
REQUIRED_SAMPLES_PER_S = AGENTS * GPUS_PER_AGENT  # every GPU once a second
POLL_INTERVAL_MS = 1000.0  # a poll's ingest must end before the next poll is due
FOUNDATION_REPEATS = harness.sized(2, 1)
MEMORY_TOTAL = 80 * 2**30

# One statement per hour of the week, rows in time order as the agents would write them:
# every GPU's reading of second s, then s + 1. Busy and idle stretches of 1.5 h.
LOAD_SQL = """
INSERT INTO gpus_gpusample (gpu_id, at, utilization_gpu, utilization_memory,
                            memory_used_bytes, temperature_c, power_w, sm_clock_mhz)
SELECT g.id, %(start)s::timestamptz + s * interval '1 second',
       CASE WHEN (s / 5400 + g.id) %% 4 = 0 THEN floor(random() * 30) / 10
            ELSE floor(550 + random() * 450) / 10 END,
       floor(random() * 1000) / 10,
       (random() * %(memory)s)::bigint,
       30 + floor(random() * 56),
       floor(6000 + random() * 64000) / 100,
       1410 + 285 * floor(random() * 3)::int
FROM generate_series(%(first)s::int, %(last)s::int) AS s
CROSS JOIN unnest(%(gpus)s::bigint[]) AS g(id)
ORDER BY s, g.id
"""


# --- small helpers -------------------------------------------------------------------------
def spread(values_ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values_ms)
    p95 = statistics.quantiles(ordered, n=20)[18] if len(ordered) >= 2 else ordered[0]
    return {"p50_ms": statistics.median(ordered), "p95_ms": p95, "max_ms": ordered[-1]}


def timed_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = fn()
    return 1000 * (time.perf_counter() - began), result


def sql(statement: str, params: Sequence[Any] = ()) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def cpu_seconds(pid: int | None = None) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


# --- 2. sustained writes: the agents (processes of their own) -----------------------------
def node_name(agent: int) -> str:
    return f"gpu-bench-{agent:02d}"


def node_ip(agent: int) -> str:
    return f"10.251.{agent}.1"


def agent_poll(agent: int, rng: random.Random, now: datetime) -> GpuPoll:
    """One NVML poll of an 8-GPU H100 node, 1 or 2 processes on each GPU."""
    def processes(index: int) -> tuple[GpuProcessRecord, ...]:
        return tuple(GpuProcessRecord(pid=200_000 + 100 * agent + 10 * index + p,
                                      used_memory_bytes=rng.randrange(2**34))
                     for p in range(1 + index % 2))

    gpus = tuple(
        GpuSampleRecord(
            node=node_name(agent), gpu_index=index, uuid=f"GPU-bench-{agent:02d}-{index}",
            at=now, name="NVIDIA H100 80GB HBM3", utilization_gpu=round(rng.uniform(0, 100), 1),
            utilization_memory=round(rng.uniform(0, 100), 1),
            memory_used_bytes=rng.randrange(MEMORY_TOTAL), memory_total_bytes=MEMORY_TOTAL,
            temperature_c=float(rng.randint(30, 85)), power_w=round(rng.uniform(60, 700), 2),
            power_limit_w=700.0, sm_clock_mhz=1980, memory_clock_mhz=2619, throttle_reasons=(),
            ecc_corrected=0, ecc_uncorrected=0, mig_mode=False, processes=processes(index),
        )
        for index in range(GPUS_PER_AGENT)
    )
    return GpuPoll(node=node_name(agent), at=now, gpus=gpus, driver_version="550.54.15")


def run_agents(agents: range, conn: Connection) -> None:
    """Entry point of one writer process: the polls of `agents`, one after another."""
    try:
        conn.send(("done", *_run_agents(agents, conn)))
    except Exception as exc:  # any failure goes back to the parent, as text
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _run_agents(agents: range, conn: Connection) -> tuple[list[float], float, float]:
    import django

    django.setup()
    from django.utils import timezone

    from dashboard.gpus.ingest import ingest_gpu_poll

    rng = random.Random(agents.start)

    def poll_once(agent: int) -> float:
        now = timezone.now()
        poll = agent_poll(agent, rng, now)
        return timed_ms(lambda: ingest_gpu_poll(poll, node_ip(agent), now))[0]

    for agent in agents:  # unmeasured: creates the Gpu and process rows, opens connections
        poll_once(agent)
    conn.send(("ready", sql("SELECT pg_backend_pid()")[0][0]))
    seconds = conn.recv()
    cpu_before, started = cpu_seconds(), time.perf_counter()
    latencies = []
    for agent in itertools.cycle(agents):
        if time.perf_counter() - started >= seconds:
            break
        latencies.append(poll_once(agent))
    return latencies, time.perf_counter() - started, cpu_seconds() - cpu_before


# --- 2. sustained writes: the parent ------------------------------------------------------
class PushCounter(threading.Thread):
    """A browser's place in the GPU wall's group, so that every push is really delivered
    through Redis; counts what arrives."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.ready, self.stopping = threading.Event(), threading.Event()
        self.received = 0
        self.error: str | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._listen())
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self.ready.set()

    async def _listen(self) -> None:
        from channels.layers import get_channel_layer

        from dashboard.core.push import GPUS_GROUP

        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(GPUS_GROUP, channel)
        self.ready.set()
        try:
            while not self.stopping.is_set():
                try:
                    await asyncio.wait_for(layer.receive(channel), 0.5)
                except TimeoutError:
                    continue
                self.received += 1
        finally:
            await layer.group_discard(GPUS_GROUP, channel)


def expect(conn: Connection, kind: str, timeout: float = 120.0) -> tuple[Any, ...]:
    if not conn.poll(timeout):
        raise RuntimeError(f"no {kind!r} from a writer process within {timeout:.0f} s")
    message = conn.recv()
    if message[0] != kind:
        raise RuntimeError(f"writer process: {message[1] if message[0] == 'error' else message}")
    return tuple(message[1:])


@contextmanager
def writer_processes() -> Iterator[list[Connection]]:
    ctx = multiprocessing.get_context("spawn")
    per = AGENTS // WORKERS
    pipes, processes = [], []
    for worker in range(WORKERS):
        parent, child = ctx.Pipe()
        agents = range(worker * per, AGENTS if worker == WORKERS - 1 else (worker + 1) * per)
        process = ctx.Process(target=run_agents, args=(agents, child), daemon=True)
        process.start()
        pipes.append(parent)
        processes.append(process)
    try:
        yield pipes
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()


def sustained_writes() -> dict[str, Any]:
    print(f"\n[2] {AGENTS} agents x {GPUS_PER_AGENT} GPUs in {WORKERS} writer processes, "
          f"{WRITE_S:.0f} s flat out …", flush=True)
    counter = PushCounter()
    with writer_processes() as pipes:
        backends = [expect(pipe, "ready")[0] for pipe in pipes]
        counter.start()
        counter.ready.wait(30)
        if counter.error:
            raise RuntimeError(f"push subscriber: {counter.error}")
        rows_before = sql("SELECT count(*) FROM gpus_gpusample")[0][0]
        backend_cpu = sum(cpu_seconds(pid) for pid in backends)
        for pipe in pipes:
            pipe.send(WRITE_S)
        results = [expect(pipe, "done", WRITE_S + 120) for pipe in pipes]
        backend_cpu = sum(cpu_seconds(pid) for pid in backends) - backend_cpu
    time.sleep(1.0)  # the last pushes on their way
    counter.stopping.set()
    counter.join(5)
    stored = sql("SELECT count(*) FROM gpus_gpusample")[0][0] - rows_before
    return write_figures(results, backend_cpu, stored, counter.received)


def write_figures(results: list[tuple[Any, ...]], backend_cpu: float, stored: int,
                  pushes: int) -> dict[str, Any]:
    latencies = [ms for lat, _, _ in results for ms in lat]
    polls = len(latencies)
    polls_per_s = sum(len(lat) / elapsed for lat, elapsed, _ in results)
    samples_per_s = polls_per_s * GPUS_PER_AGENT
    if stored != polls * GPUS_PER_AGENT:
        raise RuntimeError(f"{polls} polls should have stored {polls * GPUS_PER_AGENT} "
                           f"samples; found {stored}")
    return {
        "polls": polls, "polls_per_s": polls_per_s, "samples_per_s": samples_per_s,
        "latency": spread(latencies),
        "headroom": samples_per_s / REQUIRED_SAMPLES_PER_S,
        "writer_cpu_ms_per_poll": 1000 * sum(cpu for _, _, cpu in results) / polls,
        "backend_cpu_ms_per_poll": 1000 * backend_cpu / polls,
        # In a cluster each agent runs on its own node: the shared part is Postgres.
        "samples_per_postgres_core_s": GPUS_PER_AGENT * polls / max(backend_cpu, 1e-9),
        "pushes_sent": polls, "pushes_received": pushes,
    }


def foundation(url: str) -> dict[str, Any]:
    """Raw COPY capacity (and write_gpu_samples beside it), exactly as ingest_bench.py."""
    import psycopg

    print(f"\n[2] foundation: ingest_bench.py's measurement, {FOUNDATION_REPEATS} repeats …",
          flush=True)
    samples = ingest_bench.make_samples()
    with psycopg.connect(url, autocommit=True) as raw_conn:
        rates = ingest_bench.measure(raw_conn, samples, FOUNDATION_REPEATS)
    return ingest_bench.summarise(rates, len(samples))


# --- 1. a week of samples, rolled up and charted -------------------------------------------
def create_week_gpus(now: datetime) -> list[int]:
    from dashboard.gpus.models import Gpu

    gpus = [Gpu(uuid=f"GPU-week-{index}", node="week-node", node_ip="10.252.0.1", index=index,
                first_seen_at=now - WEEK, at=now)
            for index in range(WEEK_GPUS)]
    return [g.pk for g in Gpu.objects.bulk_create(gpus)]


def load_week(url: str, pks: list[int], now: datetime) -> dict[str, Any]:
    import psycopg

    print(f"\n[1] loading a week of 1 Hz samples of {len(pks)} GPUs …", flush=True)
    seconds = int(WEEK.total_seconds())
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for hour in range(seconds // 3600):
            conn.execute(LOAD_SQL, {"start": now - WEEK, "first": hour * 3600,
                                    "last": hour * 3600 + 3599, "gpus": pks,
                                    "memory": MEMORY_TOTAL})
            if hour % 24 == 23:
                print(f"  day {(hour + 1) // 24} loaded", flush=True)
        load_s = time.perf_counter() - started
        analyze_ms = timed_ms(lambda: conn.execute("ANALYZE gpus_gpusample; ANALYZE gpus_gpu"))[0]
    rows = seconds * len(pks)
    print(f"  {rows:,} rows in {load_s:.1f} s ({rows / load_s:,.0f} rows/s); "
          f"ANALYZE {analyze_ms / 1000:.1f} s", flush=True)
    return {"rows": rows, "load_s": load_s, "analyze_s": analyze_ms / 1000}


def catch_up(now: datetime) -> dict[str, Any]:
    from dashboard.gpus.retention import roll_up

    print("[1] roll_up(now): catching up the week …", flush=True)
    ms, written = timed_ms(lambda: roll_up(now))
    sql("ANALYZE gpus_gpurollup")  # what autovacuum would soon do
    print(f"  {written:,} rollup rows in {ms / 1000:.1f} s", flush=True)
    return {"rollups_written": written, "seconds": ms / 1000}


def time_charts(pks: list[int], now: datetime, window: timedelta,
                reads: int = CHART_READS) -> dict[str, Any]:
    from dashboard.gpus.series import gpu_chart

    query_ms, dict_ms, points, sources, buckets = [], [], [], set(), set()
    for i in range(reads):
        ms, chart = timed_ms(lambda i=i: gpu_chart(pks[i % len(pks)], now - window, now, POINTS))
        query_ms.append(ms)
        dict_ms.append(timed_ms(chart.as_dict)[0])
        points.append(len(chart.rows))
        sources.add(chart.source)
        buckets.add(chart.bucket_s)
    return {**spread(query_ms), "as_dict_p50_ms": statistics.median(dict_ms),
            "reads": reads, "points_min": min(points), "points_max": max(points),
            "source": "/".join(sorted(sources)), "bucket_s": "/".join(map(str, sorted(buckets)))}


def naive_aggregate(pks: list[int], now: datetime) -> dict[str, Any]:
    """The 7-day chart's query on the raw table: what gpu_chart would cost without rollups."""
    from dashboard.gpus.series import _raw, bucket_seconds

    bucket = bucket_seconds(now - WEEK, now, POINTS)
    runs = [timed_ms(lambda i=i: _raw(pks[i % len(pks)], now - WEEK, now, bucket))
            for i in range(NAIVE_RUNS)]
    return {**spread([ms for ms, _ in runs]), "runs": NAIVE_RUNS, "points": len(runs[0][1]),
            "bucket_s": bucket}


def naive_fetch(pks: list[int], now: datetime) -> dict[str, Any]:
    """Every reading of the week for one GPU, into Python through the ORM."""
    from dashboard.gpus.models import GpuSample

    def fetch(pk: int) -> list[tuple]:
        rows = GpuSample.objects.filter(gpu_id=pk, at__gte=now - WEEK, at__lt=now)
        return list(rows.order_by("at").values_list(
            "at", "utilization_gpu", "memory_used_bytes", "temperature_c", "power_w"))

    runs = [timed_ms(lambda i=i: fetch(pks[i])) for i in range(FETCH_RUNS)]
    return {**spread([ms for ms, _ in runs]), "runs": FETCH_RUNS, "rows": len(runs[0][1])}


def rollups_match_raw(pk: int, now: datetime) -> dict[str, Any]:
    """The 7-day chart from rollups against the same buckets aggregated from raw rows:
    every bucket after the first compared value by value, the first (the one `since`
    falls in) by its sample count."""
    from dashboard.gpus.series import _raw, gpu_chart

    chart = gpu_chart(pk, now - WEEK, now, POINTS)
    raw = _raw(pk, now - WEEK, now, chart.bucket_s)
    first = raw[0][0]
    charted = {row[0]: row for row in chart.rows}
    worst = 0.0
    for expected in raw[1:]:
        got = charted.get(expected[0])
        if got is None or got[8] != expected[8]:
            worst = float("inf")
            continue
        for x, y in zip(got[1:8], expected[1:8], strict=True):
            if (x is None) != (y is None):
                worst = float("inf")
            elif x is not None:
                worst = max(worst, abs(float(x) - float(y)) / max(abs(float(y)), 1.0))
    return {"rest_match": worst < 1e-9 and set(charted) <= {r[0] for r in raw},
            "max_relative_diff": worst, "chart_buckets": len(chart.rows),
            "raw_buckets": len(raw), "first_bucket_samples": {
                "chart": charted[first][8] if first in charted else 0, "raw": raw[0][8]}}


def table_sizes() -> dict[str, dict[str, int]]:
    return {
        table: {"bytes": sql("SELECT pg_total_relation_size(%s)", [table])[0][0],
                "rows": sql(f"SELECT count(*) FROM {table}")[0][0]}
        for table in ("gpus_gpusample", "gpus_gpurollup")
    }


def charts(url: str) -> tuple[datetime, dict[str, Any]]:
    from django.utils import timezone

    now = timezone.now().replace(microsecond=0)
    pks = create_week_gpus(now)
    figures: dict[str, Any] = {"load": load_week(url, pks, now), "roll_up": catch_up(now)}
    print(f"[1] timing charts ({CHART_READS} reads a window, cycling {len(pks)} GPUs) …",
          flush=True)
    figures["windows"] = {label: time_charts(pks, now, span) for label, span in WINDOWS}
    print("[1] baselines: the week from the raw table …", flush=True)
    figures["naive_aggregate"] = naive_aggregate(pks, now)
    figures["naive_fetch"] = naive_fetch(pks, now)
    figures["check"] = rollups_match_raw(pks[0], now)
    figures["sizes"] = table_sizes()
    figures["pks"] = pks
    return now, figures


# --- 3. pruning ----------------------------------------------------------------------------
def time_prune(now: datetime, pks: list[int]) -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection

    from dashboard.gpus.retention import prune

    print(f"\n[3] prune(now): raw samples older than {settings.RAW_RETENTION_H:g} h, "
          f"batches of {settings.RETENTION_BATCH:,} …", flush=True)
    deletes: list[tuple[float, float]] = []  # (start, end) of each DELETE of raw samples

    def watch(execute: Callable[..., Any], statement: str, *args: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(statement, *args)
        finally:
            if statement.lstrip().upper().startswith('DELETE FROM "GPUS_GPUSAMPLE"'):
                deletes.append((began, time.perf_counter()))

    started = time.perf_counter()
    with connection.execute_wrapper(watch):
        result = prune(now)
    total = time.perf_counter() - started
    ends = [started] + [end for _, end in deletes]
    batches = [1000 * (b - a) for a, b in itertools.pairwise(ends)]
    statements = [1000 * (end - began) for began, end in deletes]
    return {
        "deleted": result, "seconds": total, "batches": len(deletes),
        "batch_rows": settings.RETENTION_BATCH,
        "longest_batch_ms": max(batches, default=0.0),
        "longest_delete_ms": max(statements, default=0.0),
        "median_batch_ms": statistics.median(batches) if batches else 0.0,
        # Whether a batch costs more as the deleted rows pile up ahead of the next one.
        "first_10_median_ms": statistics.median(batches[:10]) if batches else 0.0,
        "last_10_median_ms": statistics.median(batches[-10:]) if batches else 0.0,
        "raw_left": sql("SELECT count(*) FROM gpus_gpusample")[0][0],
        "chart_after": time_charts(pks, now, WEEK, reads=10),
    }


# --- the report ----------------------------------------------------------------------------
def report_charts(c: dict[str, Any]) -> None:
    rows = [[label, w["source"], w["bucket_s"], w["points_max"], w["p50_ms"], w["p95_ms"],
             w["max_ms"], w["as_dict_p50_ms"]] for label, w in c["windows"].items()]
    na, nf = c["naive_aggregate"], c["naive_fetch"]
    rows.append(["7 d", f"raw table (forced, {na['runs']} runs)", na["bucket_s"], na["points"],
                 na["p50_ms"], na["p95_ms"], na["max_ms"], "-"])
    rows.append(["7 d", f"all rows to Python ({nf['runs']} runs)", "-", nf["rows"],
                 nf["p50_ms"], nf["p95_ms"], nf["max_ms"], "-"])
    harness.print_table(
        f"[1] gpu_chart(pk, now - window, now, {POINTS}) over a week of 1 Hz samples of "
        f"{WEEK_GPUS} GPUs ({c['load']['rows']:,} rows), {CHART_READS} reads per window",
        ["window", "source", "bucket s", "points", "p50 ms", "p95 ms", "max ms", "as_dict ms"],
        rows)
    roll = c["roll_up"]
    print(f"roll_up(now) catching up the week: {roll['seconds']:.1f} s, "
          f"{roll['rollups_written']:,} rollup rows; loading took {c['load']['load_s']:.1f} s "
          f"(INSERT … SELECT generate_series, in time order), ANALYZE "
          f"{c['load']['analyze_s']:.1f} s")
    check, first = c["check"], c["check"]["first_bucket_samples"]
    print(f"7 d chart from rollups against the raw aggregate of the same buckets: "
          f"{check['chart_buckets']} vs {check['raw_buckets']} buckets; after the first, "
          f"equal: {'yes' if check['rest_match'] else 'NO'} (max relative difference "
          f"{check['max_relative_diff']:.1e}); first bucket: {first['chart']} vs "
          f"{first['raw']} samples")
    harness.print_table(
        "[1] table sizes (pg_total_relation_size: heap + indexes + TOAST)",
        ["table", "rows", "MiB", "bytes/row"],
        [[t, s["rows"], s["bytes"] / 2**20, s["bytes"] / max(s["rows"], 1)]
         for t, s in c["sizes"].items()])


def report_writes(w: dict[str, Any], base: dict[str, Any]) -> None:
    lat = w["latency"]
    b512, b5000 = base["batches"][str(ingest_bench.BATCH_SIZES[0])], base["batches"]["5000"]
    harness.print_table(
        f"[2] sustained writes: {AGENTS} agents x {GPUS_PER_AGENT} GPUs, one ingest_gpu_poll "
        f"per agent poll, {WORKERS} processes flat out for {WRITE_S:.0f} s; pushes on Redis",
        ["path", "samples/s", "polls/s", "p50 ms/poll", "p95 ms/poll", "x 512/s needed"],
        [["ingest_gpu_poll (8 samples + GPUs, processes, push)", w["samples_per_s"],
          w["polls_per_s"], lat["p50_ms"], lat["p95_ms"], f"{w['headroom']:.1f}"],
         ["foundation: raw COPY, batches of 512 (median)", b512["raw"]["median"], "-", "-",
          "-", f"{b512['raw']['median'] / REQUIRED_SAMPLES_PER_S:.0f}"],
         ["foundation: raw COPY, batches of 5,000 (median)", b5000["raw"]["median"], "-", "-",
          "-", f"{b5000['raw']['median'] / REQUIRED_SAMPLES_PER_S:.0f}"],
         ["write_gpu_samples, batches of 512 (median)", b512["project"]["median"], "-", "-",
          "-", f"{b512['project']['median'] / REQUIRED_SAMPLES_PER_S:.0f}"]])
    print(f"{w['polls']:,} polls, max {lat['max_ms']:.0f} ms; CPU per poll: writer (Python) "
          f"{w['writer_cpu_ms_per_poll']:.1f} ms, its Postgres backend "
          f"{w['backend_cpu_ms_per_poll']:.1f} ms; pushes received by a Redis subscriber: "
          f"{w['pushes_received']:,} of {w['pushes_sent']:,}")
    print(f"Here all 64 agents share this machine's 2 cores with Postgres. In a cluster each "
          f"agent has its own node and only Postgres is shared: at "
          f"{w['backend_cpu_ms_per_poll']:.1f} ms of backend CPU per poll, one Postgres core "
          f"takes ~{w['samples_per_postgres_core_s']:,.0f} samples/s "
          f"({w['samples_per_postgres_core_s'] / REQUIRED_SAMPLES_PER_S:.0f}x the need; "
          f"derived, not measured)")


def report_prune(p: dict[str, Any]) -> None:
    after = p["chart_after"]
    print(f"\n[3] prune(now): {p['deleted']['samples']:,} raw samples and "
          f"{p['deleted']['rollups']:,} rollups deleted in {p['seconds']:.1f} s "
          f"({p['deleted']['samples'] / p['seconds']:,.0f} rows/s), {p['batches']} batches of "
          f"{p['batch_rows']:,}: median batch {p['median_batch_ms']:.0f} ms (first 10: "
          f"{p['first_10_median_ms']:.0f}, last 10: {p['last_10_median_ms']:.0f}), longest batch "
          f"{p['longest_batch_ms']:.0f} ms, longest DELETE (row locks held) "
          f"{p['longest_delete_ms']:.0f} ms; {p['raw_left']:,} raw rows left. 7 d chart "
          f"afterwards: {after['source']}, {after['points_max']} points, p50 "
          f"{after['p50_ms']:.1f} ms")


def summary_rows(f: dict[str, Any]) -> list[list[Any]]:
    c, w, p = f["charts"], f["writes"], f["prune"]
    week = c["windows"]["7 d"]
    rows: list[list[Any]] = [
        ["7 d chart p95 ms", week["p95_ms"], f"< {TARGET_CHART_P95_MS:.0f}",
         week["p95_ms"] < TARGET_CHART_P95_MS],
        ["7 d chart points per series", week["points_max"], f"<= {POINTS}",
         week["points_max"] <= POINTS],
    ]
    for label, figures in list(c["windows"].items())[1:]:
        rows.append([f"{label} chart p95 ms ({figures['source']})", figures["p95_ms"],
                     f"points <= {POINTS}", figures["points_max"] <= POINTS])
    rows += [
        ["7 d from the raw table, p50 ms", c["naive_aggregate"]["p50_ms"], "-", "-"],
        ["7 d all rows into Python, p50 ms", c["naive_fetch"]["p50_ms"], "-", "-"],
        ["roll_up catch-up of a week, s", c["roll_up"]["seconds"], "-", "-"],
        ["gpus_gpusample MiB (week, 8 GPUs)", c["sizes"]["gpus_gpusample"]["bytes"] / 2**20,
         "-", "-"],
        ["gpus_gpurollup MiB (week, 8 GPUs)", c["sizes"]["gpus_gpurollup"]["bytes"] / 2**20,
         "-", "-"],
        ["512-GPU cluster: samples/s", w["samples_per_s"], f">= {REQUIRED_SAMPLES_PER_S}",
         w["samples_per_s"] >= REQUIRED_SAMPLES_PER_S],
        ["  headroom (x the 1 Hz need)", f"{w['headroom']:.1f}", ">= 1", w["headroom"] >= 1],
        ["  one poll's ingest p95 ms", w["latency"]["p95_ms"],
         f"< {POLL_INTERVAL_MS:.0f} (poll interval)", w["latency"]["p95_ms"] < POLL_INTERVAL_MS],
        ["  derived: samples/s per Postgres core", w["samples_per_postgres_core_s"], "-", "-"],
        ["foundation raw COPY samples/s (512)", f["foundation"]["batches"]["512"]["raw"]["median"],
         "-", "-"],
        ["prune: longest batch ms", p["longest_batch_ms"], "-", "-"],
        ["prune: longest DELETE (row locks) ms", p["longest_delete_ms"], "-", "-"],
        ["prune: rows deleted per s", p["deleted"]["samples"] / p["seconds"], "-", "-"],
    ]
    return rows


def report(figures: dict[str, Any]) -> None:
    report_charts(figures["charts"])
    report_writes(figures["writes"], figures["foundation"])
    report_prune(figures["prune"])
    harness.print_table(f"Summary ({NOISE})", ["figure", "measured", "target", "met"],
                        summary_rows(figures))
    print()


def run(url: str) -> dict[str, Any]:
    figures: dict[str, Any] = {"bench": "gpu", "foundation": foundation(url)}
    figures["writes"] = sustained_writes()
    sql("TRUNCATE gpus_gpusample RESTART IDENTITY")
    now, figures["charts"] = charts(url)
    figures["prune"] = time_prune(now, figures["charts"].pop("pks"))
    return figures


def main() -> int:
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    print(NOISE)
    with harness.throwaway_database("gpu") as url:
        harness.setup_django(url, REDIS_URL=redis_url,
                             RAYWATCH_CHANNEL_PREFIX=f"raywatch-gpu-bench-{os.getpid()}",
                             **harness.sized({}, SMOKE_ENV))
        print(f"bench database: {url} (dropped at the end); channel layer: Redis, {redis_url}")
        started = time.perf_counter()
        figures = run(url)
        figures["wall_s"] = time.perf_counter() - started
    report(figures)
    print(f"whole run: {figures['wall_s']:.0f} s; max RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    harness.print_json(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
