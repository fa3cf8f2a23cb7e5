"""Quiet history: what months of finished searches under the log roots cost `make run`.

Goal (issue 12): with 5,000 finished trials (100,000 result lines) in the log directory,
the steady-state CPU of `manage.py serve` on the embedded default is within 1.2x of the
same server watching an empty directory. Goal (memory flat in history): its RSS is within
1.2x too, both for a server started on a database that holds the history already and for
`make run`'s first start on a machine with history (a fresh database: the server reads
it all itself), sampled at the same moment as the empty one's, once every server has
read its history and its trial dirs have settled. Also printed, in the same run against
the same empty history: the trial-log poll's time once the history is ingested and
settled, and the first ingest's rate. Prints figures; the exit status says only whether
the benchmark itself worked.

    python bench/quiet_history_bench.py
    python bench/quiet_history_bench.py --smoke   # 50 trials, seconds of sampling
    # overrides: TMPDIR (the generated history, ~130 MB, and two SQLite databases)

No Postgres, Redis or Ray: the embedded default is SQLite, and RAY_ADDRESS points at a
closed port so that no local cluster is started (the Ray poll fails fast, alike in both).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import psutil
from push_latency import percentile
from trial_logs_bench import RUN_STAMP, TrialSpec, result_line, trial_specs, write_trial

from collectors.localray import free_port
from tests.served import embedded_env, manage, start_serve, stop_serve

TRIALS, EXPERIMENTS = harness.sized((5000, 100), (50, 5))
LINES = 20  # results per trial: 100,000 in all
ERROR_EVERY = 20  # one finished trial in 20 errored: error.txt, status ERROR
STEADY_POLLS = harness.sized(30, 3)
# RAYWATCH_LOG_QUIET_S: the default (60 s) for real; 1 s so that a smoke run settles at once.
QUIET_S = harness.sized(60.0, 1.0)
SETTLE_MARGIN_S = harness.sized(40.0, 6.0)  # after QUIET_S: the first full pass, a poll or two
SAMPLE_S = harness.sized(60.0, 4.0)
GOAL_RATIO = 1.2
FIRST_START = "first start"  # the server that reads the history itself, as `make run` would
INGEST_TIMEOUT_S = 900


# --- a ~/ray_results of finished searches, as Tune 2.60 leaves it -------------------------
def write_history(root: Path) -> tuple[int, int]:
    """TRIALS finished trials in EXPERIMENTS experiment dirs; (result lines, bytes)."""
    specs = trial_specs(root, TRIALS, EXPERIMENTS)
    end = time.time() - 30 * 86400  # a month ago
    for n, spec in enumerate(specs):
        write_trial(spec, LINES, end, tail=None)
        write_tune_files(spec, LINES, end, errored=n % ERROR_EVERY == ERROR_EVERY - 1)
    by_experiment: dict[Path, list[tuple[int, TrialSpec]]] = {}
    for n, spec in enumerate(specs):
        by_experiment.setdefault(spec.path.parent, []).append((n, spec))
    for exp_dir, members in by_experiment.items():
        write_experiment_files(exp_dir, members, end)
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    return TRIALS * LINES, size


def write_tune_files(spec: TrialSpec, lines: int, end: float, errored: bool) -> None:
    """What else Tune writes into a trial dir (raywatch reads none of it when result.json
    is there, but lists the directory): progress.csv, params.pkl, an event file, and
    error.txt / error.pkl after a failure. The event file and pickles hold filler bytes
    of about their real size."""
    rows = [json.loads(result_line(spec, i, end - (lines - i))) for i in range(1, lines + 1)]
    keys = [k for k in rows[0] if k != "config"]
    csv = [",".join(keys)] + [",".join(str(r[k]) for k in keys) for r in rows]
    (spec.path / "progress.csv").write_text("\n".join(csv) + "\n")
    (spec.path / "params.pkl").write_bytes(b"\x80\x05" + spec.config_json.encode())
    events = f"events.out.tfevents.{int(end)}.gpu-node-{spec.node:02d}"
    (spec.path / events).write_bytes(b"\0" * (lines * 380))
    if errored:
        (spec.path / "error.txt").write_text(
            "Failure # 1 (occurred at 2026-10-22_16-30-01)\n"
            "ray::ImplicitFunc.train() (pid=40001, ip=10.0.0.11)\n"
            "RuntimeError: CUDA out of memory.\n")
        (spec.path / "error.pkl").write_bytes(b"\x80\x05filler")


def write_experiment_files(exp_dir: Path, members: list[tuple[int, TrialSpec]],
                           end: float) -> None:
    """experiment_state-*.json (every trial TERMINATED, or ERROR), the search
    algorithm's state and tuner.pkl."""
    trial_data = [
        [json.dumps({"trial_id": s.trial_id, "status": "ERROR" if n % ERROR_EVERY
                     == ERROR_EVERY - 1 else "TERMINATED"}),
         json.dumps({"num_failures": int(n % ERROR_EVERY == ERROR_EVERY - 1),
                     "last_result_time": end})]
        for n, s in members
    ]
    (exp_dir / f"experiment_state-{RUN_STAMP}.json").write_text(
        json.dumps({"trial_data": trial_data}))
    (exp_dir / f"basic-variant-state-{RUN_STAMP}.json").write_text('{"_variant_iter": null}')
    (exp_dir / "tuner.pkl").write_bytes(b"\x80\x05filler")


# --- raywatch on the embedded default ---------------------------------------------------------
def raywatch_env(data_dir: Path, log_dir: Path) -> dict[str, str]:
    """`make run`'s environment, watching `log_dir`, with no Ray to start and no GPU."""
    return embedded_env(
        data_dir, RAYWATCH_LOG_DIRS=str(log_dir), RAYWATCH_LOG_QUIET_S=str(QUIET_S),
        RAY_ADDRESS=f"http://127.0.0.1:{free_port()}", RAYWATCH_GPU_SOURCE="off",
        RAYWATCH_SECRET_KEY=harness.BENCH_SECRET_KEY,
    )


def prepare(env: dict[str, str]) -> None:
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "ensure_admin")


@dataclass
class PollFigures:
    wall_ms: list[float]
    cpu_ms: list[float]

    def row(self) -> dict[str, float]:
        return {"median_ms": statistics.median(self.wall_ms),
                "p95_ms": percentile(self.wall_ms, 95),
                "cpu_median_ms": statistics.median(self.cpu_ms)}


def timed_poll() -> tuple[float, float]:
    """One poll_trial_logs() as the scheduler runs it: (wall ms, CPU ms of this process)."""
    from dashboard.trials.tasks import poll_trial_logs

    wall, cpu = time.perf_counter(), time.process_time()
    poll_trial_logs()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3


def poll_at_schedule(count: int) -> PollFigures:
    """`count` polls spaced as the embedded scheduler spaces them (start to start)."""
    from django.conf import settings

    figures = PollFigures([], [])
    for _ in range(count):
        started = time.monotonic()
        wall, cpu = timed_poll()
        figures.wall_ms.append(wall)
        figures.cpu_ms.append(cpu)
        time.sleep(max(0.0, settings.POLL_LOGS_S - (time.monotonic() - started)))
    return figures


def settled_trial_dirs() -> tuple[int, int]:
    """(quiet, known) trial dirs in the poll's scanner: a bench-only peek."""
    from django.conf import settings

    from dashboard.trials.ingest import log_scanner

    scanner = log_scanner([Path(p) for p in settings.LOG_DIRS])
    return sum(e.quiet for e in scanner.trials.values()), len(scanner.trials)


def measure_polls(history: Path, empty: Path) -> dict[str, Any]:
    """In this process, on one SQLite database: steady polls of the empty dir, the first
    ingest of the history, then steady polls of it once every trial dir settled."""
    from django.conf import settings

    from dashboard.trials.models import StepResult

    settings.LOG_DIRS = [str(empty)]
    empty_polls = poll_at_schedule(STEADY_POLLS)
    settings.LOG_DIRS = [str(history)]
    first_ms, _ = timed_poll()
    results = StepResult.objects.count()
    waited = time.monotonic()
    while settled_trial_dirs()[0] < TRIALS and time.monotonic() - waited < QUIET_S + 120:
        poll_at_schedule(1)
    quiet, known = settled_trial_dirs()
    history_polls = poll_at_schedule(STEADY_POLLS)
    return {"empty": empty_polls.row(), "history": history_polls.row(),
            "first_ingest_s": first_ms / 1e3, "results": results,
            "ingest_results_per_s": results / (first_ms / 1e3),
            "settled_dirs": quiet, "known_dirs": known}


def setup_django_here(env: dict[str, str]) -> None:
    for name in ("DATABASE_URL", "REDIS_URL", "RAY_ADDRESS"):
        os.environ.pop(name, None)
    os.environ.update(env)
    os.environ["DJANGO_SETTINGS_MODULE"] = "dashboard.settings"
    import django

    django.setup()


def close_django() -> None:
    from django.db import connections

    connections.close_all()


# --- `manage.py serve`: CPU and memory ---------------------------------------------------------
@contextmanager
def served(env: dict[str, str], log: Path) -> Iterator[psutil.Process]:
    port = free_port()
    server = start_serve(env, port, log)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/login/", server, log)
        yield psutil.Process(server.pid)
    finally:
        stop_serve(server, log)


def wait_until_up(url: str, server: subprocess.Popen[bytes], log: Path,
                  timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"manage.py serve exited:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"manage.py serve did not answer {url} in {timeout_s:.0f} s")


def tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def rss_mb(process: psutil.Process) -> float:
    total = 0
    for member in tree(process):
        try:
            total += member.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def stored_results(data_dir: Path) -> int:
    """The results in a server's SQLite database, read beside it (a bench-only peek;
    0 while the server holds it locked)."""
    from dashboard.trials.models import StepResult

    uri = f"file:{data_dir / 'raywatch.sqlite3'}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as db:
            return db.execute(f"SELECT count(*) FROM {StepResult._meta.db_table}").fetchone()[0]
    except sqlite3.Error:
        return 0


def measure_servers(envs: dict[str, dict[str, str]], logs: Path,
                    results: int) -> dict[str, dict[str, float]]:
    """The servers at once, so the same minute of this machine bills them all; sampled at
    the same moments (CPU over SAMPLE_S, RSS at its start and end), once the first-start
    server has stored the whole history and QUIET_S + SETTLE_MARGIN_S more have passed:
    every server's trial dirs have settled by then."""
    with ExitStack() as stack:
        procs = {name: stack.enter_context(served(env, logs / f"serve-{name}.log"))
                 for name, env in envs.items()}
        started = time.monotonic()
        first_data = Path(envs[FIRST_START]["RAYWATCH_DATA_DIR"])
        while stored_results(first_data) < results:
            if time.monotonic() - started > INGEST_TIMEOUT_S:
                raise SystemExit(f"the first-start server stored {stored_results(first_data):,} "
                                 f"of {results:,} results in {INGEST_TIMEOUT_S} s")
            time.sleep(1)
        ingest_s = time.monotonic() - started
        print(f"first-start server: the history stored {ingest_s:.0f} s after it answered",
              flush=True)
        time.sleep(QUIET_S + SETTLE_MARGIN_S)
        rss_start = {name: rss_mb(p) for name, p in procs.items()}
        before = {name: harness.tree_cpu_seconds(p) for name, p in procs.items()}
        time.sleep(SAMPLE_S)
        after = {name: harness.tree_cpu_seconds(p) for name, p in procs.items()}
        out = {name: {"cpu_s_per_min": (after[name] - before[name]) * 60 / SAMPLE_S,
                      "rss_mb": rss_mb(p), "rss_mb_window_start": rss_start[name]}
               for name, p in procs.items()}
        out[FIRST_START]["ingest_s"] = ingest_s
        return out


# --- report ------------------------------------------------------------------------------------
def report(polls: dict[str, Any], servers: dict[str, dict[str, float]], lines: int,
           size: int) -> dict[str, Any]:
    empty, history = polls["empty"], polls["history"]
    ratio = servers["history"]["cpu_s_per_min"] / max(servers["empty"]["cpu_s_per_min"], 1e-9)
    first = servers[FIRST_START]
    rss = {name: servers[name]["rss_mb"] / servers["empty"]["rss_mb"]
           for name in ("history", FIRST_START)}
    harness.print_table(
        f"{TRIALS:,} finished trials ({lines:,} result lines, {size / 2**20:.0f} MB) "
        "vs an empty log directory, embedded default (SQLite)",
        ["", "empty", f"{TRIALS:,} trials", "ratio", "goal"],
        [
            ["trial-log poll median ms", empty["median_ms"], history["median_ms"],
             f"{history['median_ms'] / empty['median_ms']:.1f}x", ""],
            ["trial-log poll p95 ms", empty["p95_ms"], history["p95_ms"],
             f"{history['p95_ms'] / empty['p95_ms']:.1f}x", ""],
            ["trial-log poll CPU median ms", empty["cpu_median_ms"], history["cpu_median_ms"],
             f"{history['cpu_median_ms'] / max(empty['cpu_median_ms'], 1e-9):.1f}x", ""],
            ["serve CPU s/min (steady)", servers["empty"]["cpu_s_per_min"],
             servers["history"]["cpu_s_per_min"], f"{ratio:.2f}x", f"<= {GOAL_RATIO}x"],
            ["serve RSS MB (database filled before)", servers["empty"]["rss_mb"],
             servers["history"]["rss_mb"], f"{rss['history']:.2f}x", f"<= {GOAL_RATIO}x"],
            ["serve RSS MB (first start: reads it)", servers["empty"]["rss_mb"],
             first["rss_mb"], f"{rss[FIRST_START]:.2f}x", f"<= {GOAL_RATIO}x"],
            ["serve CPU s/min (first start, steady)", servers["empty"]["cpu_s_per_min"],
             first["cpu_s_per_min"],
             f"{first['cpu_s_per_min'] / max(servers['empty']['cpu_s_per_min'], 1e-9):.2f}x", ""],
        ],
    )
    print("\nserve RSS MB at the window's start -> end: " + ", ".join(
        f"{name} {s['rss_mb_window_start']:.0f} -> {s['rss_mb']:.0f}"
        for name, s in servers.items()))
    print(f"first start: the server stored the history {first['ingest_s']:.0f} s after it "
          "answered (its first poll); every server sampled from "
          f"{QUIET_S + SETTLE_MARGIN_S:.0f} s after that")
    print(f"\nfirst ingest: {polls['results']:,} results in {polls['first_ingest_s']:.1f} s "
          f"= {polls['ingest_results_per_s']:,.0f} results/s (one poll, with the detectors)")
    print(f"settled before the steady polls: {polls['settled_dirs']:,} of "
          f"{polls['known_dirs']:,} trial dirs; servers sampled over {SAMPLE_S:.0f} s, "
          f"{QUIET_S + SETTLE_MARGIN_S:.0f} s after they answered")
    print(f"goal: serve CPU within {GOAL_RATIO}x of empty history: measured {ratio:.2f}x "
          f"({'met' if ratio <= GOAL_RATIO else 'MISSED'})")
    worst = max(rss.values())
    print(f"goal: serve RSS within {GOAL_RATIO}x of empty history: measured "
          f"{rss['history']:.2f}x (database filled before), {rss[FIRST_START]:.2f}x (first "
          f"start) ({'met' if worst <= GOAL_RATIO else 'MISSED'})")
    return {"trials": TRIALS, "result_lines": lines, "history_mb": size / 2**20,
            "poll_empty": empty, "poll_history": history,
            "serve_empty": servers["empty"], "serve_history": servers["history"],
            "serve_first_start": first, "rss_ratio": rss["history"],
            "rss_ratio_first_start": rss[FIRST_START],
            "cpu_ratio": ratio, "goal_ratio": GOAL_RATIO,
            "first_ingest_results_per_s": polls["ingest_results_per_s"],
            "first_ingest_s": polls["first_ingest_s"], "smoke": harness.SMOKE}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="raywatch-quiet-") as scratch:
        work = Path(scratch)
        history, empty = work / "ray_results", work / "empty_results"
        empty.mkdir()
        started = time.monotonic()
        lines, size = write_history(history)
        print(f"wrote {TRIALS:,} trials in {time.monotonic() - started:.0f} s", flush=True)
        envs = {"empty": raywatch_env(work / "data-empty", empty),
                "history": raywatch_env(work / "data-history", history),
                FIRST_START: raywatch_env(work / "data-first-start", history)}
        for env in envs.values():
            prepare(env)
        setup_django_here(envs["history"])
        polls = measure_polls(history, empty)
        close_django()  # the history server takes this database over, already ingested
        print("polled in-process; starting three servers", flush=True)
        servers = measure_servers(envs, work, polls["results"])
        harness.print_json(report(polls, servers, lines, size))


if __name__ == "__main__":
    main()
