"""What judging RL runs from evidence costs the server (issue 42: "evidence sampling with
10,000 running calls and 100 runs, its cost per node beside the poll without it, in one
run").

Ray is tests/raystandin.py with 1,000 live actors on one node and 9,990 running calls.
Baseline: no trainer among them (no run). Runs: 100 of the actors are verl `TaskRunner`s,
one per job, each running its `TaskRunner.run`, and the other calls are their steps'
calls (each names its job's run call as its parent). For each row: the Ray poll
(`poll_ray_state`, which finds the runs) and the trial detectors' pass
(`evaluate_trials`) at three moments of a first step that never prints: 40 s in (every
run silent past the first look: its trainer's stacks are asked for), once the agents
answered "waits in ray.get" (each run followed to its step's calls: their stacks asked,
at most FOLLOW_CALLS a run), and once those answered "busy". The stacks themselves are
taken by the node's agent (bench/agent_bench.py measures that): here they are asked and
answered in the database, and the counts say how many were asked.

    .venv/bin/python bench/evidence_bench.py          # full size
    .venv/bin/python bench/evidence_bench.py --smoke  # tiny sizes: does it still run?

A throwaway Postgres database on BENCH_DATABASE_URL's server; the in-memory channel layer.
"""

from __future__ import annotations

import os
import statistics
from datetime import timedelta
from unittest import mock

import harness

from tests.raystandin import Cluster, RayStandIn, cluster_of, task_row

ACTORS = harness.sized(1_000, 30)
RUNS = harness.sized(100, 3)
CALLS = harness.sized(9_990, 60)
NAMES = ("WorkerDict.actor_rollout_generate_sequences", "WorkerDict.actor_rollout_compute_log_prob",
         "RewardManager.compute_reward", "WorkerDict.actor_rollout_update_actor")
REPEAT = harness.sized(3, 1)


def cluster_with(runs: int) -> Cluster:
    """ACTORS actors over RUNS jobs; the first `runs` of them (one a job) trainers, each
    running its run call; CALLS calls in all, the others their job's trainer's children."""
    cluster = cluster_of(ACTORS, RUNS)
    trainers = cluster.actors[:runs]
    parents: dict[str, str] = {}
    tasks = []
    for n, trainer in enumerate(trainers):
        trainer["class_name"], trainer["repr_name"] = "TaskRunner", "TaskRunner"
        row = task_row(n, "TaskRunner.run", trainer)
        parents[trainer["job_id"]] = row["task_id"]
        tasks.append(row)
    workers = cluster.actors[runs:]
    for n in range(len(tasks), CALLS):
        actor = workers[n % len(workers)]
        row = task_row(n, NAMES[n % len(NAMES)], actor)
        row["parent_task_id"] = parents.get(actor["job_id"], row["parent_task_id"])
        tasks.append(row)
    cluster.tasks = tasks
    return cluster


def answer(model: type, **fields: object) -> int:
    """The agents' answer to every stack asked and not yet answered."""
    from django.utils import timezone

    return model.objects.filter(state="pending").update(state="taken", taken_at=timezone.now(),
                                                        samples=3, **fields)


def run(label: str, runs: int) -> dict[str, object]:
    from django.conf import settings
    from django.utils import timezone

    from collectors.pystack import RAY_GET
    from dashboard.cluster.models import Actor, CallStack, CallTiming, RayCall, Worker
    from dashboard.cluster.tasks import poll_ray_state
    from dashboard.incidents.models import Incident
    from dashboard.trials.detect import evaluate_trials
    from dashboard.trials.models import Experiment, Trial, TrialStack

    for model in (Incident, TrialStack, CallStack, Trial, Experiment, Actor, Worker, RayCall,
                  CallTiming):
        model.objects.all().delete()
    stand_in = RayStandIn(cluster_with(runs))
    with stand_in.running() as url:
        settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS = None, url
        settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None
        polls = [harness.seconds(poll_ray_state) for _ in range(REPEAT)]
        found = harness.seconds(lambda: evaluate_trials(timezone.now()))

        def at(seconds_in: float) -> list[float]:
            """Passes of the detectors that many seconds into the runs' first step (found
            then by Ray's poll, which is current), every run due."""
            poll_ray_state()
            now = timezone.now()
            Trial.objects.update(first_seen_at=now - timedelta(seconds=seconds_in),
                                 check_at=now)
            return [harness.seconds(lambda: evaluate_trials(timezone.now()))
                    for _ in range(REPEAT)]

        first_look = at(40)  # past the first look at every run: its trainer's stacks asked
        trainer_stacks = answer(TrialStack, hung=True, waits_on=RAY_GET,
                                verdict="hung in run, waiting on ray.get on another call")
        followed = at(45)
        call_stacks = answer(CallStack, hung=False, verdict="slow, busy in generate")
        judged = at(50)
    return {"scenario": label, "runs": Trial.objects.count(), "running_calls": CALLS,
            "poll_median_s": round(statistics.median(polls), 3), "first_pass_s": found,
            "first_look_s": round(statistics.median(first_look), 3),
            "trainer_stacks_asked": trainer_stacks,
            "followed_s": round(statistics.median(followed), 3),
            "call_stacks_asked": call_stacks,
            "judged_s": round(statistics.median(judged), 3),
            "incidents": Incident.objects.count()}


def main() -> None:
    os.environ.pop("REDIS_URL", None)  # live push is not measured here
    with harness.throwaway_database("evidence") as database:
        harness.setup_django(database)
        # The stacks are the agents' to take: asked here, never sent.
        with mock.patch("dashboard.trials.stacks.send_soon"), \
                mock.patch("dashboard.cluster.callstacks.send_soon"):
            rows = [run("no run (baseline)", 0), run(f"{RUNS} runs, first step silent", RUNS)]
    base = rows[0]
    harness.print_table(
        f"Evidence for RL runs, stand-in, {ACTORS:,} live actors, {CALLS:,} running calls "
        f"({REPEAT} passes a moment)",
        ["scenario", "runs", "poll s", "first pass s", "40 s in s", "x baseline",
         "trainer stacks asked", "followed s", "call stacks asked", "judged s", "incidents"],
        [[r["scenario"], r["runs"], r["poll_median_s"], r["first_pass_s"], r["first_look_s"],
          round(float(r["first_look_s"]) / max(float(base["first_look_s"]), 1e-6), 2),
          r["trainer_stacks_asked"], r["followed_s"], r["call_stacks_asked"], r["judged_s"],
          r["incidents"]] for r in rows])
    harness.print_json({"rows": rows, "actors": ACTORS, "calls": CALLS, "runs": RUNS})


if __name__ == "__main__":
    main()
