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

Not measured here: the CPU a minute of the whole production topology (web, Celery
worker, notifier and beat) beside an empty one; `quiet_history_bench.py` does that on
the embedded default at 5,000 trials. Two Celery topologies on one Redis would share
their queues.

    python bench/history_scale_bench.py            # ~6 GB under TMPDIR, ~15 minutes
    python bench/history_scale_bench.py --smoke    # 60 trials, seconds
    # overrides: BENCH_TRIALS, BENCH_DATABASE_URL (its server)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import first_ingest_bench
import harness
import quiet_history_bench

from collectors.localray import free_port

TRIALS = int(os.environ.get("BENCH_TRIALS", harness.sized("100000", "60")))
GOAL_RATIO = 1.2


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
        with harness.throwaway_database("history") as database:
            os.environ.pop("REDIS_URL", None)
            harness.setup_django(
                database, RAYWATCH_LOG_DIRS=str(empty),
                RAYWATCH_LOG_QUIET_S=str(quiet_history_bench.QUIET_S),
                RAY_ADDRESS=f"http://127.0.0.1:{free_port()}", RAYWATCH_GPU_SOURCE="off",
                RAYWATCH_DATA_DIR=str(work / "data"))
            polls = quiet_history_bench.measure_polls(history, empty)
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
    harness.print_json({"bench": "history_scale", "trials": TRIALS, "polls": polls,
                        "ratio": ratio, "goal_ratio": GOAL_RATIO})
    return 0


if __name__ == "__main__":
    sys.exit(main())
