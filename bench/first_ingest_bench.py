"""First ingest at COPY speed (issue 16, goal 3): a finished history of Tune searches,
ingested by raywatch's own central path (ingest_logs: scan, tail, parse, store) into an
empty database, beside raw COPY of the very rows it stored into the same table, in the
same run. Goal: the ingest goes at no less than 0.5x of raw COPY on Postgres. Also
printed: the embedded default's (SQLite) rate on the smaller history, and what reading
and parsing the files alone takes (no database), the ceiling of any store path.

Two history sizes, so that the rate can be seen flat in size. Prints figures; the exit
status says only whether the benchmark itself worked.

    python bench/first_ingest_bench.py
    python bench/first_ingest_bench.py --smoke   # 30 and 60 trials, seconds
    # overrides: BENCH_DATABASE_URL (the server; a throwaway database is made on it),
    #            TMPDIR (the generated histories: ~30 kB a trial, one size at a time)

Each measurement runs in a process of its own (`--worker`), so that each backend gets a
fresh Django, a fresh scanner and a cold start, as a restarted raywatch would.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import psutil
from quiet_history_bench import write_experiment_files, write_tune_files
from trial_logs_bench import TrialSpec, trial_specs, write_trial

SIZES = harness.sized((4_000, 16_000), (30, 60))  # trials; the first is also run on SQLite
LINES = harness.sized(50, 40)  # results per trial
EXPERIMENTS = harness.sized(20, 2)
ERROR_EVERY = 20  # one finished trial in 20 errored, as quiet_history_bench has it
GOAL_RATIO = 0.5
COLUMNS = ("trial_id", "attempt", "iteration", "at", "ingested_at", "time_this_iter_s",
           "metrics")


# --- the history ------------------------------------------------------------------------------
def _write_one(args: tuple[TrialSpec, int, float]) -> None:
    spec, n, end = args
    write_trial(spec, LINES, end, tail=None)
    write_tune_files(spec, LINES, end, errored=n % ERROR_EVERY == ERROR_EVERY - 1)


def write_history(root: Path, trials: int) -> int:
    """`trials` finished trials as Tune 2.60 leaves them; the history's bytes."""
    specs = trial_specs(root, trials, EXPERIMENTS)
    end = time.time() - 30 * 86400  # a month ago
    with multiprocessing.get_context("spawn").Pool(os.cpu_count() or 1) as pool:
        pool.map(_write_one, [(s, n, end) for n, s in enumerate(specs)], chunksize=64)
    by_experiment: dict[Path, list[tuple[int, TrialSpec]]] = {}
    for n, spec in enumerate(specs):
        by_experiment.setdefault(spec.path.parent, []).append((n, spec))
    for exp_dir, members in by_experiment.items():
        write_experiment_files(exp_dir, members, end)
    os.sync()  # the writeback now, not during the ingest
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


# --- measurements, each in a worker process ---------------------------------------------------
class Clock:
    """Wall time, and the CPU seconds of this process and of its Postgres backend: on
    a machine shared with other work the wall time swings with the load, the CPU
    seconds much less."""

    def __init__(self) -> None:
        from django.db import connection

        self.backend = None
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.backend = psutil.Process(cursor.fetchone()[0])
        self.load = os.getloadavg()[0]
        self.wall, self.cpu, self.server = time.perf_counter(), time.process_time(), self._server()

    def _server(self) -> float:
        if self.backend is None:
            return 0.0
        times = self.backend.cpu_times()
        return times.user + times.system

    def read(self, count: int) -> dict[str, float]:
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu + self._server() - self.server
        return {"seconds": wall, "per_s": count / wall, "cpu_s": cpu, "per_cpu_s": count / cpu,
                "load": self.load}


def timed_ingest(root: Path) -> dict[str, Any]:
    """raywatch's central path over the whole history, one poll's worth."""
    from django.utils import timezone

    from dashboard.trials.ingest import ingest_logs
    from dashboard.trials.models import StepResult

    clock = Clock()
    stats = ingest_logs([root], timezone.now())
    stored = StepResult.objects.count()
    return {**clock.read(stored), "results": stats.results, "stored": stored}


def timed_raw_copy() -> dict[str, Any]:
    """The rows the ingest stored, taken out, the table emptied, and COPYed back in one
    transaction: what Postgres itself takes, with the same indexes and constraints."""
    from django.db import connection, transaction

    columns = ", ".join(COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns.replace('metrics', 'metrics::text')} "
                       "FROM trials_stepresult ORDER BY id")
        rows = cursor.fetchall()
        cursor.execute("TRUNCATE trials_stepresult")
        cursor.execute("VACUUM ANALYZE trials_stepresult")
    clock = Clock()
    with transaction.atomic(), connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY trials_stepresult ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    return {**clock.read(len(rows)), "rows": len(rows)}


def timed_parse_only(root: Path) -> dict[str, Any]:
    """Reading and parsing every result.json, storing nothing."""
    from collectors.tunelogs import tail_result_json

    files = sorted(root.glob("*/*/result.json"))
    clock = Clock()
    lines = sum(len(tail_result_json(f, None, None).results) for f in files)
    return {**clock.read(lines), "lines": lines}


def worker(backend: str, root: Path, scratch: Path) -> None:
    if backend == "postgres":
        with harness.throwaway_database("first_ingest") as url:
            harness.setup_django(url)
            figures = {"ingest": timed_ingest(root), "copy": timed_raw_copy()}
    else:
        url = f"sqlite:///{scratch / 'raywatch.sqlite3'}"
        os.environ.update(harness.django_env(url))
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        figures = {"ingest": timed_ingest(root), "parse": timed_parse_only(root)}
    print(json.dumps(figures), flush=True)


def run_worker(backend: str, root: Path, scratch: Path) -> dict[str, Any]:
    args = [sys.executable, __file__, "--worker", backend, str(root), str(scratch)]
    done = subprocess.run([*args, *(["--smoke"] if harness.SMOKE else [])],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{backend} worker exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- report ----------------------------------------------------------------------------------
def measure(trials: int, with_sqlite: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="raywatch-first-ingest-") as scratch:
        root = Path(scratch) / "ray_results"
        started = time.monotonic()
        size = write_history(root, trials)
        print(f"wrote {trials:,} trials x {LINES} results ({size / 2**20:.0f} MB) in "
              f"{time.monotonic() - started:.0f} s", flush=True)
        figures = {"trials": trials, "results": trials * LINES, "history_mb": size / 2**20,
                   "postgres": run_worker("postgres", root, Path(scratch))}
        if with_sqlite:
            figures["sqlite"] = run_worker("sqlite", root, Path(scratch))
        pg = figures["postgres"]
        figures["ratio"] = pg["ingest"]["per_s"] / pg["copy"]["per_s"]
        figures["cpu_ratio"] = pg["ingest"]["per_cpu_s"] / pg["copy"]["per_cpu_s"]
        return figures


def report(runs: list[dict[str, Any]]) -> None:
    rows = []
    for run in runs:
        ingest, copy = run["postgres"]["ingest"], run["postgres"]["copy"]
        rows.append([f"{run['trials']:,} x {LINES}", ingest["stored"], ingest["per_s"],
                     copy["per_s"], f"{run['ratio']:.2f}", ingest["per_cpu_s"],
                     copy["per_cpu_s"], f"{run['cpu_ratio']:.2f}",
                     f"{ingest['load']:.1f} / {copy['load']:.1f}"])
    harness.print_table(
        "first ingest of a finished history on Postgres: raywatch's central path vs raw "
        "COPY of the same rows into the same table (same run); per CPU s: this process "
        "and its Postgres backend",
        ["trials x results", "stored", "ingest /s", "raw COPY /s", "ratio",
         "ingest /CPU s", "COPY /CPU s", "CPU ratio", "load avg"], rows)
    first = runs[0]
    sqlite, pg = first["sqlite"], first["postgres"]
    harness.print_table(
        f"the same {first['trials']:,} trials on the embedded default, and the files alone",
        ["", "results/s", "per CPU s", "vs Postgres ingest (CPU)", "load avg"],
        [["SQLite ingest", sqlite["ingest"]["per_s"], sqlite["ingest"]["per_cpu_s"],
          f"{sqlite['ingest']['per_cpu_s'] / pg['ingest']['per_cpu_s']:.2f}x",
          f"{sqlite['ingest']['load']:.1f}"],
         ["read + parse only", sqlite["parse"]["per_s"], sqlite["parse"]["per_cpu_s"],
          f"{sqlite['parse']['per_cpu_s'] / pg['ingest']['per_cpu_s']:.2f}x",
          f"{sqlite['parse']['load']:.1f}"]])
    worst = min(r["ratio"] for r in runs)
    print(f"\ngoal: ingest >= {GOAL_RATIO}x raw COPY: measured {worst:.2f}x at worst "
          f"({'met' if worst >= GOAL_RATIO else 'MISSED'}); CPU ratio "
          f"{min(r['cpu_ratio'] for r in runs):.2f}x at worst; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    harness.print_json({"runs": runs, "goal_ratio": GOAL_RATIO, "worst_ratio": worst,
                        "lines": LINES, "smoke": harness.SMOKE})


def main() -> None:
    if "--worker" in sys.argv:
        at = sys.argv.index("--worker")
        worker(sys.argv[at + 1], Path(sys.argv[at + 2]), Path(sys.argv[at + 3]))
        return
    runs = [measure(trials, with_sqlite=n == 0) for n, trials in enumerate(SIZES)]
    report(runs)


if __name__ == "__main__":
    main()
