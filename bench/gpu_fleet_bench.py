"""4,096 GPUs at 1 Hz into one Postgres (issue 16, goal 4): 512 nodes x 8 GPUs, every
GPU sampled once a second, with rollups and retention running, and the GPU wall's push
delivered through Redis to a subscriber that counts it.

Each second the 512 nodes' NVML polls (8 H100s, 1-2 processes a GPU: gpu_bench.py's
`agent_poll`) are stored two ways, one after the other, in the same run:

- *per node* (before): one `ingest_gpu_poll` a node, each its own transaction and push,
  as an agent's report of one poll is stored;
- *per node, 5 polls a report*: agents with `RAYWATCH_AGENT_SEND_S=5`: each second a
  fifth of the nodes report their last 5 polls, one `ingest_gpu_polls` a report (the
  same samples a second);
- *batched*: `ingest_gpu_polls` with the polls of CHUNK nodes in one call (one upsert of
  their GPUs, one COPY of their samples, one process write, one push), as an agent's
  report of several polls is stored, and as a writer that gathers many agents' polls
  would store them.

`roll_up(now)` and `prune(now)` run every 10 s in the same process (retention). The
figures: how long a second's writes take (p50 / p95 / max; under 1 s keeps up), the
samples a second that rate sustains, the CPU of this process and of its Postgres
backend a second, and the pushes the subscriber received. Building the polls is not
timed (in raywatch it is decoding the agents' reports).

    python bench/gpu_fleet_bench.py
    python bench/gpu_fleet_bench.py --smoke   # 8 nodes, 3 s a way
    # overrides: BENCH_DATABASE_URL, BENCH_REDIS_URL, BENCH_NODES, BENCH_SECONDS, BENCH_CHUNK
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

import gpu_bench
import harness

NODES = int(os.environ.get("BENCH_NODES", harness.sized("512", "8")))
SECONDS = int(os.environ.get("BENCH_SECONDS", harness.sized("20", "3")))
CHUNK = int(os.environ.get("BENCH_CHUNK", harness.sized("128", "4")))
GPUS = gpu_bench.GPUS_PER_AGENT
RETENTION_EVERY_S = 10
GATHER = 5  # RAYWATCH_AGENT_SEND_S=5: each node's report carries its last 5 polls
GATHERED = f"per node, {GATHER} polls a report"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"


def one_way(mode: str, rng: random.Random, seconds: int = SECONDS) -> dict[str, Any]:
    from django.utils import timezone

    from dashboard.gpus.ingest import ingest_gpu_poll, ingest_gpu_polls
    from dashboard.gpus.retention import prune, roll_up

    backend = gpu_bench.sql("SELECT pg_backend_pid()")[0][0]
    counter = gpu_bench.PushCounter()
    counter.start()
    counter.ready.wait(30)
    rows_before = gpu_bench.sql("SELECT count(*) FROM gpus_gpusample")[0][0]
    cpu0, backend0 = gpu_bench.cpu_seconds(), gpu_bench.cpu_seconds(backend)
    ticks: list[float] = []
    calls = 0
    began = time.perf_counter()
    for second in range(seconds):
        tick = time.perf_counter()
        now = timezone.now()
        if mode == GATHERED:  # a fifth of the nodes report their last GATHER polls
            reports = [[(gpu_bench.agent_poll(n, rng, now - timedelta(seconds=k)),
                         gpu_bench.node_ip(n)) for k in range(GATHER)]
                       for n in range(second % GATHER, NODES, GATHER)]
        polls = [(gpu_bench.agent_poll(n, rng, now), gpu_bench.node_ip(n)) for n in range(NODES)]
        started = time.perf_counter()
        if mode == GATHERED:
            for report in reports:
                ingest_gpu_polls(report, now)
            calls += len(reports)
        elif mode == "per node":
            for poll, ip in polls:
                ingest_gpu_poll(poll, ip, now)
            calls += len(polls)
        else:
            for start in range(0, len(polls), CHUNK):
                ingest_gpu_polls(polls[start:start + CHUNK], now)
                calls += 1
        ticks.append(time.perf_counter() - started)
        if second % RETENTION_EVERY_S == RETENTION_EVERY_S - 1:
            roll_up(now)
            prune(now)
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - tick)))
    wall = time.perf_counter() - began
    cpu, backend_cpu = gpu_bench.cpu_seconds() - cpu0, gpu_bench.cpu_seconds(backend) - backend0
    time.sleep(1.0)  # the last pushes on their way
    counter.stopping.set()
    counter.join(5)
    stored = gpu_bench.sql("SELECT count(*) FROM gpus_gpusample")[0][0] - rows_before
    if mode != GATHERED and stored != seconds * NODES * GPUS:
        raise RuntimeError(f"{mode}: {seconds * NODES * GPUS} samples written, {stored} stored")
    p50 = statistics.median(ticks)
    return {"mode": mode, "calls": calls, "samples": stored,
            "tick_s": {"p50": p50, "p95": statistics.quantiles(ticks, n=20)[18]
                       if len(ticks) > 1 else p50, "max": max(ticks)},
            "sustainable_samples_per_s": stored / seconds / p50,
            "cpu_s_per_s": cpu / wall, "postgres_cpu_s_per_s": backend_cpu / wall,
            "pushes_sent": calls, "pushes_received": counter.received}


def main() -> int:
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    with harness.throwaway_database("gpufleet") as url:
        harness.setup_django(url, REDIS_URL=redis_url,
                             RAYWATCH_CHANNEL_PREFIX=f"raywatch-gpu-fleet-{os.getpid()}")
        rng = random.Random(4096)
        from django.utils import timezone

        from dashboard.gpus.ingest import ingest_gpu_polls

        now = timezone.now()  # the GPU and process rows exist before either way is timed
        ingest_gpu_polls([(gpu_bench.agent_poll(n, rng, now), gpu_bench.node_ip(n))
                          for n in range(NODES)], now)
        results = [one_way(mode, rng) for mode in ("per node", GATHERED, "batched")]
    need = NODES * GPUS
    harness.print_table(
        f"{NODES} nodes x {GPUS} GPUs at 1 Hz ({need:,} samples/s needed), {SECONDS} s each "
        f"way, roll_up + prune every {RETENTION_EVERY_S} s, pushes through Redis",
        ["way", "calls", "a second's writes p50 s", "p95 s", "max s", "sustains samples/s",
         "x needed", "CPU s/s (this)", "CPU s/s (Postgres)", "pushes received"],
        [[r["mode"] + (f" ({CHUNK} nodes a call)" if r["mode"] == "batched" else ""),
          r["calls"], r["tick_s"]["p50"], r["tick_s"]["p95"], r["tick_s"]["max"],
          r["sustainable_samples_per_s"], f"{r['sustainable_samples_per_s'] / need:.2f}",
          r["cpu_s_per_s"], r["postgres_cpu_s_per_s"],
          f"{r['pushes_received']:,} of {r['pushes_sent']:,}"] for r in results])
    harness.print_json({"bench": "gpu_fleet", "nodes": NODES, "gpus": need,
                        "seconds": SECONDS, "chunk": CHUNK, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
