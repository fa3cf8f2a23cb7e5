"""What the running-calls poll costs: Ray's poll with ~10,000 running tasks and actor
calls beside the same poll of a cluster running none, in the same run (issue 26: "a
bench prints what the Ray task poll costs with 10,000 running tasks").

Ray is tests/raystandin.py (Ray 2.60's state API, row limits included; its format is
checked against a real cluster by tests/test_ray_standin_format.py), with 1,000 live
actors. Rows: no running call (the baseline); 9,990 running calls, none changing
(steady); 9,990 of which a tenth end and as many start each poll (churn: each ended
call's duration is learned). For each: the whole poll (`poll_ray_state`: fetch, parse,
store), the fetch alone, and the detectors' pass over the calls (`evaluate_resources`).
The stand-in runs in this process, so its JSON encoding shares the cores with the poll.
Prints figures; the exit status says only whether the benchmark itself worked.

    .venv/bin/python bench/ray_calls_bench.py          # BENCH_POLLS=10 polls a row
    .venv/bin/python bench/ray_calls_bench.py --smoke  # tiny sizes: does it still run?

A throwaway Postgres database on BENCH_DATABASE_URL's server; the in-memory channel layer.
"""

from __future__ import annotations

import os
import statistics

import harness

from tests.raystandin import Cluster, RayStandIn, cluster_of, task_row

POLLS = int(os.environ.get("BENCH_POLLS", harness.sized("10", "2")))
ACTORS = harness.sized(1_000, 20)
CALLS = harness.sized(9_990, 50)  # under Ray's 10,000-row page: a full one is a cut
NAMES = ("WorkerDict.actor_rollout_ref_generate_sequences", "AutoRewardManager.compute_reward",
         "WorkerDict.actor_rollout_ref_compute_log_probs",
         "WorkerDict.actor_rollout_ref_update_actor")


def task_rows(cluster: Cluster, first: int, count: int) -> list[dict]:
    """`count` running actor calls, numbered from `first`, spread over the actors."""
    actors = [a for a in cluster.actors if a["state"] == "ALIVE"]
    return [task_row(n, NAMES[n % len(NAMES)], actors[n % len(actors)])
            for n in range(first, first + count)]


def run(label: str, calls: int, churn: int) -> dict[str, object]:
    from django.utils import timezone

    from collectors.raystate import fetch_cluster
    from dashboard.cluster.endpoint import ray_endpoint
    from dashboard.cluster.models import Actor, CallTiming, RayCall, Worker
    from dashboard.cluster.tasks import poll_ray_state
    from dashboard.gpus.detect import evaluate_resources

    for model in (Actor, Worker, RayCall, CallTiming):
        model.objects.all().delete()
    cluster = cluster_of(ACTORS, 4)
    cluster.tasks = task_rows(cluster, 0, calls)
    stand_in = RayStandIn(cluster)
    with stand_in.running() as url:
        from django.conf import settings

        settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS = None, url
        settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None
        first = harness.seconds(poll_ray_state)
        polls, detects, started = [], [], calls
        for _ in range(POLLS):
            if churn:  # a tenth end, as many start
                cluster.tasks = cluster.tasks[churn:] + task_rows(cluster, started, churn)
                started += churn
            polls.append(harness.seconds(poll_ray_state))
            detects.append(harness.seconds(lambda: evaluate_resources(timezone.now())))
        fetches = [harness.seconds(lambda: fetch_cluster(ray_endpoint(), start_times_known=None))
                   for _ in range(POLLS)]
    return {"scenario": label, "running_calls": calls, "stored": RayCall.objects.count(),
            "learned": sum(len(t.durations) for t in CallTiming.objects.all()),
            "first_poll_s": first, "poll_median_s": round(statistics.median(polls), 3),
            "poll_max_s": max(polls), "fetch_median_s": round(statistics.median(fetches), 3),
            "detect_median_s": round(statistics.median(detects), 3)}


def main() -> None:
    os.environ.pop("REDIS_URL", None)  # live push is not measured here
    with harness.throwaway_database("raycalls") as database:
        harness.setup_django(database)
        rows = [run("no running call (baseline)", 0, 0),
                run("running calls, steady", CALLS, 0),
                run("running calls, a tenth replaced a poll", CALLS, CALLS // 10)]
    base = rows[0]
    harness.print_table(
        f"Ray poll with running calls, stand-in, {ACTORS:,} live actors ({POLLS} polls a row)",
        ["scenario", "running calls", "stored", "learned", "first poll s", "poll s (median)",
         "x baseline", "poll s (max)", "fetch s (median)", "detect s (median)"],
        [[r["scenario"], r["running_calls"], r["stored"], r["learned"], r["first_poll_s"],
          r["poll_median_s"], round(r["poll_median_s"] / max(base["poll_median_s"], 1e-6), 2),
          r["poll_max_s"], r["fetch_median_s"], r["detect_median_s"]] for r in rows])
    harness.print_json({"rows": rows, "polls": POLLS, "actors": ACTORS})


if __name__ == "__main__":
    main()
