"""/metrics at cluster scale: scrape time and body size at 512 GPUs and 1,000 running
trials, beside the API responses for the same fleet.

The fleet is seeded straight into a database of this run's own with bulk_create: 64 Ray
nodes x 8 GPUs (one reading each, one in eight idle), every GPU held by one RUNNING
trial's process (an actor of its own on that node), 1,000 RUNNING trials in 10 experiments
(488 of them without a GPU), 4,000 finished trials in those experiments and 4,000 in 40
searches that ended two days ago (neither in the per-trial series; the old searches not at
all), 60 firing and 1,000 resolved incidents, and the health rows of Ray, trial logs and 64
NVML agents. Before each request Ray's health and the GPUs' readings are made current again
(untimed), so the owner join runs in full and no GPU is stale.

Timed, alternating, each request through Django's full middleware stack in this process
(django.test.Client; the ASGI server adds the same to each):
  /metrics              text format, as Prometheus 2 asks; and again with gzip, as
                        Prometheus sends Accept-Encoding: gzip
  /api/gpus/            (baseline) every GPU's tile with owners: the same GPUs, what the
                        GPU wall and a script read, one page of 1,000
  /api/trials/?status=RUNNING  (baseline) the same running trials, one page of 1,000
Also: the queries of each (counted once, untimed), the series in a scrape, and each
collector's share of a scrape (its collect() alone).

    .venv/bin/python bench/metrics_bench.py
    .venv/bin/python bench/metrics_bench.py --smoke   # 2 nodes x 4 GPUs, 10 trials, 3 scrapes
    # overrides: BENCH_DATABASE_URL (its server), BENCH_SCRAPES

Needs Postgres; no Redis, Ray or GPU. About a minute on 2 cores.
"""

from __future__ import annotations

import gzip
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import harness

NOISE = "2 cores shared with other engineers' test runs: expect tens of percent of noise"
NODES, GPUS_PER_NODE = harness.sized(64, 2), harness.sized(8, 4)
RUNNING, EXPERIMENTS = harness.sized(1000, 10), harness.sized(10, 2)
FINISHED_PER_EXPERIMENT, OLD_EXPERIMENTS = harness.sized(400, 5), harness.sized(40, 2)
FIRING, RESOLVED = harness.sized(60, 3), harness.sized(1000, 10)
SCRAPES = int(os.environ.get("BENCH_SCRAPES", harness.sized("30", "3")))
GIB = 2**30


# --- the fleet -----------------------------------------------------------------------------
def seed(now: datetime, rng: random.Random) -> None:
    from django.contrib.auth.models import Group, User

    from dashboard.cluster.models import Actor, Node
    from dashboard.gpus.models import Gpu, GpuProcess

    Node.objects.bulk_create(
        Node(node_id=f"node-{n:02d}", node_ip=ip(n), hostname=f"gpu-bench-{n:02d}",
             state="ALIVE", last_seen_at=now,
             resources={"CPU": {"total": 96, "used": 40}, "GPU": {"total": 8, "used": 8}})
        for n in range(NODES))
    gpus = Gpu.objects.bulk_create(
        Gpu(uuid=f"GPU-bench-{n:02d}-{i}", node=f"gpu-bench-{n:02d}", node_ip=ip(n), index=i,
            name="NVIDIA H100 80GB HBM3", first_seen_at=now, at=now,
            utilization_gpu=1.0 if i == 0 else round(rng.uniform(40, 100), 1),
            utilization_memory=30.0, memory_used_bytes=rng.randrange(80 * GIB),
            memory_total_bytes=80 * GIB, temperature_c=float(rng.randint(35, 80)),
            power_w=round(rng.uniform(100, 700), 1), power_limit_w=700.0, sm_clock_mhz=1980,
            memory_clock_mhz=2619, throttle_reasons=[], ecc_corrected=0, ecc_uncorrected=0,
            mig_mode=False, idle_since=now - timedelta(minutes=10) if i == 0 else None)
        for n in range(NODES) for i in range(GPUS_PER_NODE))
    Actor.objects.bulk_create(
        Actor(actor_id=f"{pid(g):032x}", state="ALIVE", pid=pid(g), node_id=node_id(g),
              repr_name="ImplicitFunc", job_id="02000000", first_seen_at=now, updated_at=now)
        for g in range(len(gpus)))
    GpuProcess.objects.bulk_create(
        GpuProcess(gpu=gpu, pid=pid(g), used_memory_bytes=gpu.memory_used_bytes,
                   first_seen_at=now - timedelta(hours=1), last_seen_at=now)
        for g, gpu in enumerate(gpus))
    seed_trials(now, rng, len(gpus))
    seed_incidents(now)
    seed_health(now)
    viewer = User.objects.create_user("bench-viewer")
    viewer.groups.add(Group.objects.get_or_create(name="viewer")[0])


def ip(n: int) -> str:
    return f"10.252.{n}.1"


def pid(g: int) -> int:
    return 100_000 + g


def node_id(g: int) -> str:
    return f"node-{g // GPUS_PER_NODE:02d}"


def seed_trials(now: datetime, rng: random.Random, gpus: int) -> None:
    from dashboard.trials.models import Experiment, Trial

    active = Experiment.objects.bulk_create(Experiment(name=f"search-{e:02d}", metric="reward",
                                                       mode="max") for e in range(EXPERIMENTS))
    old = Experiment.objects.bulk_create(Experiment(name=f"last-week-{e:02d}")
                                         for e in range(OLD_EXPERIMENTS))

    def running(t: int) -> Trial:
        on_gpu = t < gpus  # the first trials hold one GPU each; the others run on CPUs
        return Trial(experiment=active[t % EXPERIMENTS], trial_id=f"run_{t:05d}",
                     status=Trial.RUNNING, pid=pid(t) if on_gpu else None,
                     node_ip=ip(t // GPUS_PER_NODE if on_gpu else t % NODES),
                     iteration=rng.randint(1, 500), last_step_s=round(rng.uniform(2, 60), 2),
                     last_result_at=now - timedelta(seconds=rng.uniform(0, 600)))

    def finished(experiment: Experiment, t: int) -> Trial:
        return Trial(experiment=experiment, trial_id=f"{experiment.name}_{t:05d}",
                     status=Trial.ERROR if t % 10 == 0 else Trial.TERMINATED,
                     node_ip=ip(t % NODES), iteration=100, last_step_s=5.0,
                     last_result_at=now - timedelta(days=2))

    Trial.objects.bulk_create((running(t) for t in range(RUNNING)), batch_size=2000)
    Trial.objects.bulk_create((finished(e, t) for e in active + old
                               for t in range(FINISHED_PER_EXPERIMENT)), batch_size=2000)
    # updated_at is auto_now: the old searches' trials last changed two days ago.
    Trial.objects.filter(experiment__in=old).update(updated_at=now - timedelta(days=2))


def seed_incidents(now: datetime) -> None:
    from dashboard.incidents.models import Incident

    kinds = [("trial_stalled", "critical"), ("step_time_regression", "warning"),
             ("gpu_idle_during_step", "warning"), ("gpu_memory_high", "warning")]

    def incident(n: int, state: str) -> Incident:
        kind, severity = kinds[n % len(kinds)]
        return Incident(kind=kind, subject=f"bench:{state}:{n}", severity=severity,
                        state=state, summary=f"{kind} {n}", opened_at=now, updated_at=now,
                        resolved_at=None if state == Incident.FIRING else now)

    Incident.objects.bulk_create([incident(n, Incident.FIRING) for n in range(FIRING)]
                                 + [incident(n, Incident.RESOLVED) for n in range(RESOLVED)])


def seed_health(now: datetime) -> None:
    from dashboard.core.models import SourceHealth

    rows = [("ray", "", 2.0), ("trial_logs", "", 2.0)]
    rows += [("nvml", f"gpu-bench-{n:02d}", 1.0) for n in range(NODES)]
    SourceHealth.objects.bulk_create(
        SourceHealth(source=source, scope=scope, state=SourceHealth.HEALTHY,
                     last_success_at=now, last_attempt_at=now, last_duration_ms=25.0,
                     interval_s=interval) for source, scope, interval in rows)


def freshen() -> None:
    """Ray's view and every GPU's reading current again (the bench runs longer than
    either stays fresh without polls)."""
    from django.utils import timezone

    from dashboard.core.models import SourceHealth
    from dashboard.gpus.models import Gpu

    now = timezone.now()
    SourceHealth.objects.update(last_success_at=now, last_attempt_at=now)
    Gpu.objects.update(at=now)


# --- measuring -----------------------------------------------------------------------------
def clients() -> dict[str, Callable[[], Any]]:
    from django.contrib.auth.models import User
    from django.test import Client
    from knox.models import AuthToken

    key = AuthToken.objects.create(User.objects.get(username="bench-viewer"))[1]
    web = Client(SERVER_NAME="localhost")
    api = Client(SERVER_NAME="localhost", HTTP_AUTHORIZATION=f"Token {key}")
    return {
        "/metrics": lambda: web.get("/metrics"),
        "/metrics (gzip)": lambda: web.get("/metrics", HTTP_ACCEPT_ENCODING="gzip"),
        "/api/gpus/": lambda: api.get("/api/gpus/?page_size=1000"),
        "/api/trials/ RUNNING": lambda: api.get("/api/trials/?status=RUNNING&page_size=1000"),
    }


def spread(values_ms: list[float]) -> dict[str, float]:
    ordered = sorted(values_ms)
    p95 = statistics.quantiles(ordered, n=20)[18] if len(ordered) >= 2 else ordered[0]
    return {"p50_ms": statistics.median(ordered), "p95_ms": p95, "max_ms": ordered[-1]}


def measure(requests: dict[str, Callable[[], Any]]) -> dict[str, dict[str, Any]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    figures: dict[str, dict[str, Any]] = {}
    for label, request in requests.items():  # once each, untimed: warm-up, size, queries
        freshen()
        with CaptureQueriesContext(connection) as queries:
            response = request()
        if response.status_code != 200:
            raise SystemExit(f"{label}: HTTP {response.status_code}: {response.content[:300]!r}")
        figures[label] = {"bytes": len(response.content), "queries": len(queries),
                          "times_ms": []}
    for n in range(SCRAPES):
        order = list(requests.items())
        for label, request in order if n % 2 == 0 else reversed(order):
            freshen()
            began = time.perf_counter()
            request()
            figures[label]["times_ms"].append(1000 * (time.perf_counter() - began))
    for figure in figures.values():
        figure.update(spread(figure.pop("times_ms")))
    return figures


def scrape_contents() -> dict[str, Any]:
    """The series in one scrape, by family, and each collector's collect() alone."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from dashboard.metrics.collectors import COLLECTORS, REGISTRY

    freshen()
    text = generate_latest(REGISTRY).decode()
    families = {f.name: len(f.samples) for f in text_string_to_metric_families(text)}
    shares: dict[str, list[float]] = {}
    for _ in range(max(SCRAPES // 3, 1)):
        freshen()
        for collector in COLLECTORS:
            began = time.perf_counter()
            list(collector.collect())
            shares.setdefault(type(collector).__name__, []).append(
                1000 * (time.perf_counter() - began))
    return {"series": sum(families.values()), "families": families,
            "gzip_bytes": len(gzip.compress(text.encode())),
            "collect_p50_ms": {name: statistics.median(v) for name, v in shares.items()}}


# --- the report ----------------------------------------------------------------------------
def report(figures: dict[str, Any]) -> None:
    requests, scrape = figures["requests"], figures["scrape"]
    base = requests["/api/gpus/"]
    harness.print_table(
        f"GET through Django, {SCRAPES} timed requests each, alternating; {NODES * GPUS_PER_NODE}"
        f" GPUs on {NODES} nodes, {RUNNING:,} RUNNING trials ({NOISE})",
        ["request", "p50 ms", "p95 ms", "max ms", "body KiB", "queries", "p50 x /api/gpus/"],
        [[label, r["p50_ms"], r["p95_ms"], r["max_ms"], r["bytes"] / 1024, r["queries"],
          f"{r['p50_ms'] / base['p50_ms']:.2f}"] for label, r in requests.items()])
    harness.print_table(
        f"One scrape: {scrape['series']:,} series", ["family", "series"],
        sorted(scrape["families"].items(), key=lambda kv: -kv[1]))
    harness.print_table("Each collector's collect() alone (p50)", ["collector", "ms"],
                        list(scrape["collect_p50_ms"].items()))
    print()


def main() -> int:
    print(NOISE)
    with harness.throwaway_database("metrics") as url:
        harness.setup_django(url)
        from django.utils import timezone

        started = time.perf_counter()
        seed(timezone.now(), random.Random(7))
        seeded_s = time.perf_counter() - started
        print(f"bench database: {url} (dropped at the end); seeded in {seeded_s:.1f} s",
              flush=True)
        figures = {"bench": "metrics", "gpus": NODES * GPUS_PER_NODE, "running_trials": RUNNING,
                   "requests": measure(clients()), "scrape": scrape_contents()}
    report(figures)
    harness.print_json(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
