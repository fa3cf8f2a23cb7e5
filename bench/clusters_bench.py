"""The Ray poll with one cluster against ten clusters of the same total size (issue 15),
in the same run.

Each cluster is tests/raystandin.py (it answers like Ray 2.60's state API; its format is
checked against a real cluster by tests/test_ray_standin_format.py): BENCH_ACTORS live
actors (one worker each) in 4 jobs, all on one cluster, or split over ten (the one
RAY_ADDRESS points at and nine added ones). Per row, after a first poll that stores
everything: steady polls of every cluster one after another (the cost: seconds and CPU
seconds of this process, the stand-ins' JSON included, as they run here too) and rounds
as raywatch runs them (`poll_ray_state`: the added clusters sent to the embedded pool,
RAY_ADDRESS's polled in place, the round over when the last one is stored).

    .venv/bin/python bench/clusters_bench.py          # BENCH_ACTORS=5000, BENCH_POLLS=5
    .venv/bin/python bench/clusters_bench.py --smoke  # tiny sizes: does it still run?

A throwaway Postgres database on BENCH_DATABASE_URL's server; the in-memory channel layer.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import ExitStack

import harness

from tests.raystandin import RayStandIn, cluster_of

ACTORS = int(os.environ.get("BENCH_ACTORS", harness.sized("5000", "100")))
POLLS = int(os.environ.get("BENCH_POLLS", harness.sized("5", "2")))
JOBS = 4


def run(clusters: int) -> dict[str, object]:
    from django.conf import settings
    from django.utils import timezone

    from dashboard.cluster import tasks
    from dashboard.cluster.models import Actor, Cluster, Node
    from dashboard.cluster.registry import add_cluster

    Actor.objects.all().delete()
    Node.objects.all().delete()
    Cluster.objects.all().delete()
    each = ACTORS // clusters
    with ExitStack() as stack:
        urls = [stack.enter_context(RayStandIn(cluster_of(each, JOBS)).running())
                for _ in range(clusters)]
        settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS = None, urls[0]
        settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None
        for n, url in enumerate(urls[1:], 1):
            add_cluster(f"bench-{n}", url, "", timezone.now())
        added = list(Cluster.objects.exclude(name=settings.CLUSTER_NAME))

        def every_cluster() -> None:
            tasks.poll_one(None)
            for cluster in added:
                tasks.poll_one(cluster)

        every_cluster()  # the first poll: every actor new
        stored = Actor.objects.count()
        costs = [measured(every_cluster) for _ in range(POLLS)]
        rounds = [measured(lambda: round_as_raywatch_runs_it(tasks))[0] for _ in range(POLLS)]
    return {"clusters": clusters, "actors": ACTORS, "stored": stored,
            "poll_s": round(statistics.median(c[0] for c in costs), 3),
            "cpu_s": round(statistics.median(c[1] for c in costs), 3),
            "round_s": round(statistics.median(rounds), 3)}


def round_as_raywatch_runs_it(tasks) -> None:  # type: ignore[no-untyped-def]
    tasks.poll_ray_state()
    while tasks._RUNNING:  # the added clusters' polls, still in the embedded pool
        time.sleep(0.005)


def measured(call) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    os.environ.pop("REDIS_URL", None)  # the embedded pool; live push is not measured here
    with harness.throwaway_database("clusters") as database:
        harness.setup_django(database)
        rows = [run(1), run(10)]
    one, ten = rows
    harness.print_table(
        f"Ray poll: {ACTORS:,} live actors on 1 cluster vs 10 clusters of {ACTORS // 10:,} "
        f"({POLLS} steady polls a row, medians)",
        ["clusters", "actors stored", "every cluster polled, s", "CPU s", "round, s"],
        [[r["clusters"], r["stored"], r["poll_s"], r["cpu_s"], r["round_s"]] for r in rows])
    ratio = round(float(ten["cpu_s"]) / float(one["cpu_s"]), 2) if one["cpu_s"] else None
    print(f"\n10 clusters cost {ratio}x the CPU of 1 cluster of the same size "
          f"(round: {ten['round_s']} s vs {one['round_s']} s)")
    harness.print_json({"rows": rows, "cpu_ratio": ratio, "polls": POLLS})


if __name__ == "__main__":
    main()
