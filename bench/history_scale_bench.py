"""The trial-log poll with 100,000 finished trials (x 50 results) on Postgres, against
the same poll of an empty directory (issue 16, goal 1, its poll half).

The history is written under TMPDIR as Tune 2.60 leaves finished searches
(`first_ingest_bench.py`'s writer: 20 experiment dirs, `result.json` of 50 lines,
`progress.csv`, `params.pkl`, an event file of filler, `error.txt` for one trial in 20,
the experiments' state files). In this process, on a throwaway Postgres database, with
raywatch's defaults (`RAYWATCH_POLL_LOGS_S=2`, `RAYWATCH_LOG_QUIET_S=60`, rescan every
300 s): `quiet_history_bench.py`'s measurement, unchanged. 30 polls of an empty
directory spaced as the scheduler spaces them; the history's first poll (the first
ingest, detectors included); polls until every trial dir is settled; 30 measured polls.
Each poll is `poll_trial_logs()` whole: scan, ingest, detectors, push.

Then the production topology's CPU a minute: `manage.py serve` (web, Celery worker,
notifier and beat as its children) on the ingested history's database, then another on
an empty database watching the empty directory, on the Redis database of
BENCH_REDIS_URL (flushed before each and after both, so their queues never mix). The
history's runs SETTLE_S first (its scanner starts cold: the first pass walks every
trial dir and settles them after RAYWATCH_LOG_QUIET_S), the empty one's a minute; then
the process tree's CPU and the Postgres server's (postmaster, live and reaped backends)
are sampled over two windows of SAMPLE_S: the first shows whether the second is
steady. Run it on an otherwise idle machine: Postgres's figure is the whole server's.

    python bench/history_scale_bench.py            # ~5 GB under TMPDIR, ~17 minutes
    python bench/history_scale_bench.py --smoke    # 60 trials, seconds
    # overrides: BENCH_TRIALS, BENCH_DATABASE_URL (its server), BENCH_REDIS_URL (a
    # database it flushes; default db 11), BENCH_TOPOLOGY=0 (the in-process polls only)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import first_ingest_bench
import harness
import psutil
import quiet_history_bench

from collectors.localray import free_port
from tests.served import embedded_env

TRIALS = int(os.environ.get("BENCH_TRIALS", harness.sized("100000", "60")))
GOAL_RATIO = 1.2
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
SETTLE_S = harness.sized(240.0, 10.0)
SAMPLE_S = harness.sized(60.0, 4.0)
TOPOLOGY = os.environ.get("BENCH_TOPOLOGY", "1") != "0"  # 0: the in-process polls only


# --- the production topology: web, Celery worker, notifier, beat -----------------------------
def topology_env(database: str, log_dir: Path, data_dir: Path) -> dict[str, str]:
    return embedded_env(
        data_dir, DATABASE_URL=database, REDIS_URL=REDIS_URL, RAYWATCH_LOG_DIRS=str(log_dir),
        RAYWATCH_LOG_QUIET_S=str(quiet_history_bench.QUIET_S),
        RAY_ADDRESS=f"http://127.0.0.1:{free_port()}", RAYWATCH_GPU_SOURCE="off",
        RAYWATCH_SECRET_KEY=harness.BENCH_SECRET_KEY)


def flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()


def postgres_cpu() -> float:
    """CPU seconds so far of the whole Postgres server: the postmaster, its live
    backends and workers, and those it has reaped (its children's times)."""
    import psycopg

    admin = urlsplit(harness.database_url())._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]
    master = psutil.Process(int((Path(data_dir) / "postmaster.pid").read_text().split()[0]))
    reaped = master.cpu_times()
    return harness.tree_cpu_seconds(master) + reaped.children_user + reaped.children_system


def window(process: psutil.Process, seconds: float) -> dict[str, float]:
    """CPU seconds a minute over `seconds`: the server's process tree, and Postgres."""
    serve0, pg0 = harness.tree_cpu_seconds(process), postgres_cpu()
    time.sleep(seconds)
    serve1, pg1 = harness.tree_cpu_seconds(process), postgres_cpu()
    return {"serve_cpu_s_per_min": (serve1 - serve0) * 60 / seconds,
            "postgres_cpu_s_per_min": (pg1 - pg0) * 60 / seconds}


def measure_topology(envs: dict[str, dict[str, str]], logs: Path) -> dict[str, Any]:
    """One topology after the other, so that Postgres's CPU is the one topology's (the
    history's first: its scanner starts cold and needs SETTLE_S; the empty one's a
    minute)."""
    figures = {}
    try:
        for name in ("history", "empty"):
            flush_redis()  # the other topology's queues and results are not this one's
            with quiet_history_bench.served(envs[name], logs / f"{name}.log") as process:
                time.sleep(SETTLE_S if name == "history" else min(SETTLE_S, 60.0))
                before = window(process, SAMPLE_S)
                steady = window(process, SAMPLE_S)
                figures[name] = {**steady, "before": before,
                                 "processes": len(quiet_history_bench.tree(process)),
                                 "rss_mb": quiet_history_bench.rss_mb(process),
                                 "rss_by_role": rss_by_role(process)}
    finally:
        flush_redis()
    return figures


def role(member: psutil.Process) -> str:
    """What a process of the serve tree is, by its command line."""
    args = " ".join(member.cmdline())
    for needle, name in (("collectors.agent", "host agent"), ("dashboard.core.beat", "beat"),
                         ("notify@", "notifier"), ("celery", "Celery worker"),
                         ("serve", "serve (web)")):
        if needle in args:
            return name
    return member.name()


def rss_by_role(process: psutil.Process) -> dict[str, list[float]]:
    """Each process's RSS in MB, by what it is (a Celery worker's pool children beside it)."""
    roles: dict[str, list[float]] = {}
    for member in quiet_history_bench.tree(process):
        try:
            name, rss = role(member), member.memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            continue
        roles.setdefault(name, []).append(round(rss, 1))
    return roles


def main() -> int:
    quiet_history_bench.TRIALS = TRIALS  # the settled check counts these
    with tempfile.TemporaryDirectory(prefix="raywatch-history-scale-") as scratch:
        work = Path(scratch)
        history, empty = work / "ray_results", work / "empty_results"
        empty.mkdir()
        started = time.monotonic()
        size = first_ingest_bench.write_history(history, TRIALS)
        print(f"wrote {TRIALS:,} trials x {first_ingest_bench.LINES} results "
              f"({size / 2**30:.1f} GiB) in {time.monotonic() - started:.0f} s", flush=True)
        with harness.throwaway_database("history") as database, \
                harness.throwaway_database("history_empty") as empty_database:
            os.environ.pop("REDIS_URL", None)
            harness.setup_django(
                database, RAYWATCH_LOG_DIRS=str(empty),
                RAYWATCH_LOG_QUIET_S=str(quiet_history_bench.QUIET_S),
                RAY_ADDRESS=f"http://127.0.0.1:{free_port()}", RAYWATCH_GPU_SOURCE="off",
                RAYWATCH_DATA_DIR=str(work / "data"))
            polls = quiet_history_bench.measure_polls(history, empty)
            quiet_history_bench.close_django()
            # The history's topology starts where the polls above left it: their database
            # and their data dir, which holds the log reader's cursors (a restart, not a
            # new host re-reading 5,000,000 results).
            envs = {"empty": topology_env(empty_database, empty, work / "data-empty"),
                    "history": topology_env(database, history, work / "data")}
            topology: dict[str, Any] | None = None
            if TOPOLOGY:
                for env in envs.values():
                    quiet_history_bench.prepare(env)
                print("polled in-process; starting two production topologies", flush=True)
                topology = measure_topology(envs, work)
    empty_row, history_row = polls["empty"], polls["history"]
    ratio = history_row["median_ms"] / empty_row["median_ms"]
    harness.print_table(
        f"The trial-log poll on Postgres, {TRIALS:,} finished trials x "
        f"{first_ingest_bench.LINES} results against an empty directory "
        f"({polls['settled_dirs']:,} of {polls['known_dirs']:,} trial dirs settled)",
        ["log directory", "poll median ms", "p95 ms", "CPU median ms"],
        [["empty", empty_row["median_ms"], empty_row["p95_ms"], empty_row["cpu_median_ms"]],
         [f"{TRIALS:,} finished trials", history_row["median_ms"], history_row["p95_ms"],
          history_row["cpu_median_ms"]]])
    print(f"ratio (median): {ratio:.2f}x (goal {GOAL_RATIO}x); first ingest: "
          f"{polls['results']:,} results in {polls['first_ingest_s']:.0f} s "
          f"({polls['ingest_results_per_s']:,.0f} results/s)")
    if topology is not None:
        report_topology(topology)
    harness.print_json({"bench": "history_scale", "trials": TRIALS, "polls": polls,
                        "ratio": ratio, "goal_ratio": GOAL_RATIO, "topology": topology})
    return 0


def report_topology(topology: dict[str, Any]) -> None:
    empty, history = topology["empty"], topology["history"]

    def total(row: dict[str, float]) -> float:
        return row["serve_cpu_s_per_min"] + row["postgres_cpu_s_per_min"]

    rows = []
    for label, key in (("serve tree CPU s/min", "serve_cpu_s_per_min"),
                       ("Postgres server CPU s/min", "postgres_cpu_s_per_min")):
        rows.append([label, empty[key], history[key],
                     f"{history[key] / max(empty[key], 1e-9):.2f}x"])
    rows.append(["all, CPU s/min", total(empty), total(history),
                 f"{total(history) / max(total(empty), 1e-9):.2f}x"])
    rows.append(["all, the window before", total(empty["before"]), total(history["before"]),
                 f"{total(history['before']) / max(total(empty['before']), 1e-9):.2f}x"])
    rows.append(["serve tree RSS MB", empty["rss_mb"], history["rss_mb"],
                 f"{history['rss_mb'] / empty['rss_mb']:.2f}x"])
    for name in sorted(set(empty["rss_by_role"]) | set(history["rss_by_role"])):
        mine, theirs = empty["rss_by_role"].get(name, []), history["rss_by_role"].get(name, [])
        rows.append([f"  of it {name}, MB", " + ".join(map(str, mine)) or "-",
                     " + ".join(map(str, theirs)) or "-",
                     f"{sum(theirs) / sum(mine):.2f}x" if mine and theirs else ""])
    harness.print_table(
        f"Production topology (serve + Celery worker, notifier, beat: {history['processes']} "
        f"processes; Postgres, Redis), {TRIALS:,} finished trials against an empty "
        f"history, one after the other, {SAMPLE_S:.0f} s windows after {SETTLE_S:.0f} s "
        "(the history's)",
        ["", "empty", f"{TRIALS:,} trials", "ratio"], rows)
    ratio = total(history) / max(total(empty), 1e-9)
    print(f"goal: all of raywatch's CPU within {GOAL_RATIO}x of an empty history: "
          f"{ratio:.2f}x ({'met' if ratio <= GOAL_RATIO else 'MISSED'})")


if __name__ == "__main__":
    sys.exit(main())
