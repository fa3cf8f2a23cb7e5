"""10,000 running trials at once: agents' reports, the trial poll, the live push.

Goal (issue 16, goal 2): 10,000 RUNNING trials, each reporting a result every 10 s
(1,000 result lines a second), on the production path: node agents' reports stored
through `dashboard.agents.ingest`'s store (`store_updates`) and pushed, and the trial
poll (`poll_trial_logs`, RAYWATCH_CENTRAL_LOGS=0: the agents read the logs) evaluating
the detectors every second. The poll keeps up with a 1 s cadence (p95 under 1 s), and
one trial that stops reporting is caught within RAYWATCH_STALL_MIN_S + 15 s.

Baseline, in the same run on the same database: the poll as it ran before the
detectors became incremental, every unfinished trial evaluated every poll (what a
poll does as the first of its process; the bench forgets what the process knows
before each).

    .venv/bin/python bench/running_trials_bench.py
    .venv/bin/python bench/running_trials_bench.py --smoke   # 300 trials, seconds
    # overrides: BENCH_DATABASE_URL (its server), BENCH_REDIS_URL, BENCH_TRIALS,
    #            BENCH_SECONDS

The database is this run's own (created, then dropped); the channel layer is Redis (db
12 unless BENCH_REDIS_URL says otherwise) under a prefix of this run's own; every
`group_send` is counted (messages and JSON bytes) on its way out. Ray is what the Ray
poll would have stored: one live actor per trial (its pid on its node) and the "ray"
source fresh. No Ray, no agent processes: the bench process plays the agents (100 nodes,
each reporting once a second the lines its trials wrote) and the Celery worker. About 4
minutes on 2 cores.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import harness
from push_latency import percentile

TRIALS = int(os.environ.get("BENCH_TRIALS", harness.sized(10_000, 300)))
NODES = harness.sized(100, 5)
EVERY_S = harness.sized(10, 2)  # each trial reports a result every 10 s
HISTORY = 12  # results each trial already has when the run starts
SECONDS = int(os.environ.get("BENCH_SECONDS", harness.sized(60, 8)))
BASELINE_S = harness.sized(30, 3)  # seconds of the baseline's polls
WARM_UP_S = harness.sized(15, 1)
STALL_MIN_S = harness.sized(30, 4)
STALL_FACTOR = 2.0  # the hung trial's limit: max(STALL_MIN_S, 2 x its interval)
STALL_LIMIT_S = max(STALL_MIN_S, STALL_FACTOR * EVERY_S)
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/12"
EXPERIMENTS = harness.sized(10, 2)


def trial_name(n: int) -> tuple[str, str]:
    return f"asha_{n % EXPERIMENTS:02d}", f"{n:05d}_{n * 7919 % 100000:05d}"


def node_of(n: int) -> tuple[str, str]:
    k = n % NODES
    return f"{k:056x}", f"10.1.{k // 250}.{k % 250 + 1}"


def update(n: int, iteration: int, at: datetime, first: bool) -> Any:
    from collectors.records import ResultLine, TrialUpdate

    experiment, trial_id = trial_name(n)
    ip = node_of(n)[1]
    lines = tuple(
        ResultLine(trial_id=trial_id, attempt=1, iteration=i, at=at - timedelta(
            seconds=EVERY_S * (iteration - i)), time_this_iter_s=9.5, pid=20_000 + n,
            node_ip=ip, hostname=f"gpu-{n % NODES}",
            metrics={"score": 1.0 / i, "loss": 2.0 / i, "timing_s/gen": 6.0,
                     "timing_s/reward": 3.5, "lr": 0.001},
            byte_offset=i * 560)
        for i in (range(1, iteration + 1) if first else (iteration,)))
    return TrialUpdate(
        experiment=experiment, experiment_dir=f"gpu-{n % NODES}:/ray_results/{experiment}",
        trial_id=trial_id, trainable="train_llm",
        directory=f"/ray_results/{experiment}/train_llm_{trial_id}", tensorboard=False,
        results=lines, params={"lr": 0.001, "n": n} if first else None,
        tune_status="RUNNING" if first else None)


class PushCount:
    """Every group_send on its way out: how many and how many JSON bytes, by topic."""

    def __init__(self) -> None:
        self.messages: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def install(self) -> None:
        from dashboard.core import push

        send = push.send_many

        def counted(messages: list[tuple[str, str, Any]]) -> int:
            built = [(group, topic, data() if callable(data) else data)
                     for group, topic, data in messages]
            for _, topic, data in built:
                self.messages[topic] += 1
                self.bytes[topic] += len(json.dumps(data, default=str))
            return send(built)

        push.send_many = counted

    def take(self) -> tuple[int, int]:
        out = sum(self.messages.values()), sum(self.bytes.values())
        self.messages.clear()
        self.bytes.clear()
        return out


def load(now: datetime) -> None:
    """What the Ray poll and the agents stored before the run: nodes, one live actor per
    trial, and each trial's first HISTORY results."""
    from dashboard.cluster.models import Actor, Node, settings_cluster_pk
    from dashboard.trials.store import store_updates

    cluster = settings_cluster_pk()
    Node.objects.bulk_create([
        Node(cluster_id=cluster, node_id=node_of(k)[0], node_ip=node_of(k)[1], state="ALIVE",
             hostname=f"gpu-{k}", started_at=now, first_seen_at=now, last_seen_at=now,
             updated_at=now)
        for k in range(NODES)])
    Actor.objects.bulk_create([
        Actor(cluster_id=cluster, actor_id=f"{n:032x}", state="ALIVE", pid=20_000 + n,
              node_id=node_of(n)[0], class_name="ImplicitFunc", required_resources={"GPU": 1},
              first_seen_at=now, updated_at=now)
        for n in range(TRIALS)], batch_size=2000)
    # Each trial's latest result lands at a different moment of the last EVERY_S seconds.
    for start in range(0, TRIALS, 1000):
        store_updates([update(n, HISTORY, now - timedelta(seconds=n % EVERY_S + 0.5), True)
                       for n in range(start, min(TRIALS, start + 1000))], now)


def ray_fresh() -> None:
    from dashboard.core.health import record

    record("ray", "", 2.0, 5.0, None, [])


def agents(database: str, seconds: float, stalled: int, hang: Any, out: Any) -> None:
    """The node agents' reports as raywatch's web workers store them, in a process of
    its own: each second the trials whose turn it is (one in EVERY_S) write one line each,
    one report per node, stored and pushed as dashboard.agents.ingest does. Once `hang` is
    set, trial `stalled` writes no more. Puts, per second: wall and CPU seconds spent,
    lines stored, pushes sent, and how far behind its schedule it ran."""
    import django

    django.setup()
    from django.db import transaction

    from dashboard.agents.ingest import _push
    from dashboard.trials.store import store_updates

    counts = PushCount()
    counts.install()
    iteration = dict.fromkeys(range(TRIALS), HISTORY)
    seconds_out = []
    begun = time.monotonic()
    second = 0
    while time.monotonic() - begun < seconds:
        tick = begun + second
        wall, cpu = time.perf_counter(), time.process_time()
        now = datetime.now(UTC)
        due = [n for n in range(second % EVERY_S, TRIALS, EVERY_S)
               if not (n == stalled and hang.is_set())]
        by_node: dict[int, list[int]] = {}
        for n in due:
            iteration[n] += 1
            by_node.setdefault(n % NODES, []).append(n)
        for trials in by_node.values():
            with transaction.atomic():
                stats = store_updates([update(n, iteration[n], now, False) for n in trials],
                                      now)
            _push(stats)
        seconds_out.append((time.perf_counter() - wall, time.process_time() - cpu, len(due),
                            counts.take()[0], max(0.0, time.monotonic() - tick - 1.0)))
        second += 1
        rest = begun + second - time.monotonic()
        if rest > 0:
            time.sleep(rest)
    out.put(seconds_out)


def forget_process() -> None:
    """As if this poll were the first of its process: every unfinished trial evaluated."""
    from dashboard.trials import detect

    for name in ("_last_start", "_last_live", "_windows"):
        getattr(detect, name).clear()


def poll(counts: PushCount) -> tuple[float, float, int, int]:
    from dashboard.trials.tasks import poll_trial_logs

    counts.take()
    cpu, started = time.process_time(), time.perf_counter()
    poll_trial_logs()
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    messages, sent = counts.take()
    return took, cpu, messages, sent


def run(label: str, seconds: int, stalled: int, full: bool, counts: PushCount,
        hang: Any = None) -> dict[str, Any]:
    """`seconds` of polls at 1 Hz (back to back when one takes longer), while the agents'
    process stores reports."""
    from dashboard.incidents.models import Incident
    from dashboard.trials.models import Trial

    polls, cpus, msgs, sent = [], [], [], []
    caught_after = None
    stall_subject = "trial:{}/{}".format(*trial_name(stalled))
    if hang is not None:
        hang.set()
    begun = time.monotonic()
    while time.monotonic() - begun < seconds:
        tick = time.monotonic()
        ray_fresh()
        if full:
            forget_process()
        took, cpu, messages, size = poll(counts)
        polls.append(took)
        cpus.append(cpu)
        msgs.append(messages)
        sent.append(size)
        if caught_after is None and Incident.objects.filter(
                kind="trial_stalled", subject=stall_subject, state=Incident.FIRING).exists():
            last = Trial.objects.filter(trial_id=trial_name(stalled)[1]).values_list(
                "last_result_at", flat=True).first()
            caught_after = (datetime.now(UTC) - last).total_seconds() if last else None
        rest = 1.0 - (time.monotonic() - tick)
        if rest > 0:
            time.sleep(rest)
    return {"label": label, "polls": len(polls),
            "poll_p50_s": statistics.median(polls), "poll_p95_s": percentile(polls, 95),
            "poll_max_s": max(polls),
            "poll_cpu_p50_s": statistics.median(cpus),
            "push_messages_p50": statistics.median(msgs),
            "push_kb_p50": statistics.median(sent) / 1024, "stall_caught_after_s": caught_after}


def agent_figures(per_second: list[tuple[float, float, int, int, float]]) -> dict[str, Any]:
    walls, cpus, lines, pushes, behind = zip(*per_second, strict=True)
    return {"seconds": len(per_second), "lines_per_s": sum(lines) / max(1, len(lines)),
            "wall_p50_s": statistics.median(walls), "cpu_p50_s": statistics.median(cpus),
            "pushes_p50": statistics.median(pushes), "behind_s": behind[-1]}


def main() -> int:
    redis_url = os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    with harness.throwaway_database("running") as url:
        harness.setup_django(url, REDIS_URL=redis_url, RAYWATCH_CENTRAL_LOGS="0",
                             RAYWATCH_CHANNEL_PREFIX=f"raywatch-running-bench-{os.getpid()}",
                             RAYWATCH_STALL_MIN_S=str(STALL_MIN_S),
                             RAYWATCH_STALL_FACTOR=str(STALL_FACTOR),
                             RAYWATCH_ALERT_GROUP_WAIT_S="0")
        print(f"bench database: {url} (dropped at the end); channel layer: Redis, {redis_url}")
        from django.utils import timezone

        counts = PushCount()
        counts.install()
        t0 = time.perf_counter()
        load(timezone.now())
        print(f"{TRIALS:,} running trials of {HISTORY} results each on {NODES} nodes, "
              f"loaded in {time.perf_counter() - t0:.1f} s")
        ray_fresh()
        forget_process()
        first, first_cpu, first_msgs, _ = poll(counts)
        print(f"first poll of the process (every trial evaluated): {first:.2f} s, "
              f"{first_cpu:.2f} CPU s, {first_msgs} pushes")
        measured_s = max(SECONDS, int(STALL_LIMIT_S) + harness.sized(20, 4))
        stalled = TRIALS // 2  # stops reporting when the measured run begins
        context = multiprocessing.get_context("spawn")
        hang, out = context.Event(), context.Queue()
        agents_process = context.Process(target=agents, args=(
            url, BASELINE_S + WARM_UP_S + measured_s, stalled, hang, out), daemon=True)
        agents_process.start()
        baseline = run("every trial, every poll (before)", BASELINE_S, -1, True, counts)
        # The first incremental polls catch up with what the slow baseline polls left.
        run("warm-up", WARM_UP_S, -1, False, counts)
        measured = run("incremental (this checkout)", measured_s, stalled, False, counts, hang)
        per_second = out.get(timeout=600)
        agents_process.join(timeout=60)
        reports = agent_figures(per_second)
        rows = [[r["label"], r["polls"], r["poll_p50_s"], r["poll_p95_s"], r["poll_max_s"],
                 r["poll_cpu_p50_s"], r["push_messages_p50"], r["push_kb_p50"]]
                for r in (baseline, measured)]
        harness.print_table(
            f"The trial poll: {TRIALS:,} RUNNING trials, {TRIALS // EVERY_S:,} result lines "
            "a second wanted, one poll a second",
            ["poll", "polls", "p50 s", "p95 s", "max s", "CPU p50 s", "pushes p50",
             "pushed KiB p50"],
            rows)
        harness.print_table(
            "The agents' reports (one process, as web workers store them), per second",
            ["lines wanted", "lines stored", "wall s p50", "CPU s p50", "pushes p50",
             "behind schedule at the end, s"],
            [[TRIALS // EVERY_S, reports["lines_per_s"], reports["wall_p50_s"],
              reports["cpu_p50_s"], reports["pushes_p50"], reports["behind_s"]]])
        caught = measured["stall_caught_after_s"]
        print(f"\nstall of trial {trial_name(stalled)}: caught "
              + (f"{caught:.1f} s after its last result; its limit {STALL_LIMIT_S:.0f} s "
                 f"(goal: within the limit + 15 s)" if caught is not None else "NOT caught"))
        harness.print_json({"trials": TRIALS, "baseline": baseline, "measured": measured,
                            "reports": reports,
                            "stall_min_s": STALL_MIN_S, "stall_limit_s": STALL_LIMIT_S})
    return 0


if __name__ == "__main__":
    sys.exit(main())
