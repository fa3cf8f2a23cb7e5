"""The Ray state source past Ray's 10,000-row cap: one poll at 20,000 live actors beside
the same poll at 5,000 (under the cap), in the same run.

Ray is tests/raystandin.py, which answers like Ray 2.60's state API, its row limits and
truncation fields included (its format is checked against a real cluster by
tests/test_ray_standin_format.py): this machine cannot run 20,000 actors. Each actor has
its worker process, as on a real cluster. A row per scenario: the first poll (every
actor new, its start time looked up, 100 ids a request), then steady polls (nothing
changed): the whole poll (`poll_ray_state`: fetch, parse, store) and the fetch alone
(`fetch_cluster`), with the state API requests one poll makes. The stand-in runs in
this process, so its own JSON encoding shares the cores with the poll. Prints figures;
the exit status says only whether the benchmark itself worked.

    .venv/bin/python bench/ray_cap_bench.py          # BENCH_POLLS=10 steady polls a row
    .venv/bin/python bench/ray_cap_bench.py --smoke  # tiny sizes: does it still run?

A throwaway Postgres database on BENCH_DATABASE_URL's server; the in-memory channel layer.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass

import harness

from tests.raystandin import RAY_LIMIT, Cluster, RayStandIn, cluster_of

POLLS = int(os.environ.get("BENCH_POLLS", harness.sized("10", "2")))
# Smoke: the head's source limit at 100 stands in for 10,000, so the same paths run.
LIMIT = harness.sized(RAY_LIMIT, 100)


@dataclass(frozen=True)
class Scenario:
    label: str
    live: int
    jobs: int

    def cluster(self) -> Cluster:
        return cluster_of(self.live, self.jobs, dead_actors=self.live // 20)


SCENARIOS = (
    Scenario("under the cap (baseline)", harness.sized(5_000, 50), 4),
    Scenario("past the cap, 4 jobs", harness.sized(20_000, 200), 4),
    Scenario("past the cap, 1 job (Ray cuts it)", harness.sized(20_000, 200), 1),
)


def run(scenario: Scenario) -> dict[str, object]:
    from collectors.raystate import fetch_cluster
    from dashboard.cluster.endpoint import ray_endpoint
    from dashboard.cluster.models import Actor, Worker
    from dashboard.cluster.tasks import poll_ray_state
    from dashboard.core.models import SourceHealth

    Actor.objects.all().delete()
    Worker.objects.all().delete()
    stand_in = RayStandIn(scenario.cluster(), source_limit=LIMIT)
    with stand_in.running() as url:
        from django.conf import settings

        settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS = None, url
        settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None
        first = harness.seconds(poll_ray_state)
        stand_in.requests.clear()
        polls = [harness.seconds(poll_ray_state) for _ in range(POLLS)]
        requests = stand_in.requests["/api/v0/actors"] // POLLS
        fetches = [harness.seconds(lambda: fetch_cluster(ray_endpoint(), start_times_known=None))
                   for _ in range(POLLS)]
    health = SourceHealth.objects.get(source="ray")
    return {
        "scenario": scenario.label, "live_actors": scenario.live,
        "stored": Actor.objects.exclude(state="DEAD").count(),
        "first_poll_s": first, "poll_median_s": round(statistics.median(polls), 3),
        "poll_max_s": max(polls), "fetch_median_s": round(statistics.median(fetches), 3),
        "actor_requests": requests, "strip": health.state,
        "reason": health.last_error,
    }


def main() -> None:
    os.environ.pop("REDIS_URL", None)  # live push is not measured here
    with harness.throwaway_database("raycap") as database:
        harness.setup_django(database)
        rows = [run(s) for s in SCENARIOS]
    harness.print_table(
        f"Ray state poll, stand-in with Ray's {LIMIT:,}-row cap ({POLLS} steady polls a row)",
        ["scenario", "live actors", "stored", "first poll s", "poll s (median)", "poll s (max)",
         "fetch s (median)", "actor requests", "strip"],
        [[r["scenario"], r["live_actors"], r["stored"], r["first_poll_s"], r["poll_median_s"],
          r["poll_max_s"], r["fetch_median_s"], r["actor_requests"], r["strip"]] for r in rows])
    for r in rows:
        if r["reason"]:
            print(f"  {r['scenario']}: {r['reason']}")
    harness.print_json({"rows": rows, "polls": POLLS, "limit": LIMIT})


if __name__ == "__main__":
    main()
