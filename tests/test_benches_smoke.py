"""Benches cannot rot: every script in bench/ runs in its smoke mode (`--smoke`: the
same code on tiny sizes) and prints its figures; `make bench` runs every one of them.

A bench that no longer runs (exits non-zero, or prints no figures) fails the suite.
The figures themselves never pass or fail anything. The benches get this run's own
Postgres server (a database of their own, dropped afterwards) and Redis db, which they
flush: nothing lives there between two tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit
from xml.etree import ElementTree

import psutil
import psycopg
import pytest
from psycopg import sql

from tests import embedded
from tests.conftest import BENCH_BACKGROUND
from tests.embedded import Rerun
from tests.patience import patient

ROOT = Path(__file__).resolve().parent.parent
# Every script in bench/ (a file that runs as one: harness.py and other shared modules do
# not), so that a new bench is smoked, and marked, without a list to edit here.
BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*.py")
                 if 'if __name__ == "__main__"' in p.read_text())
SMOKE_TIMEOUT_S = patient(240)
# A bench's marks come from what its own code starts: Chromium, a real local Ray cluster.
NEEDS = {"sync_playwright(": pytest.mark.browser, "LocalRay(": pytest.mark.ray}


def marks_of(bench: str) -> list[pytest.MarkDecorator]:
    code = (ROOT / "bench" / bench).read_text()
    return [mark for needle, mark in NEEDS.items() if needle in code]


def redis_url() -> str:
    """The benches' Redis db, which they flush: the suite's own, except in the background
    run beside the suite, which gets the db below it."""
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"
    if not os.environ.get(BENCH_BACKGROUND):
        return url
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    return parts._replace(path=f"/{db - 1 if db > 0 else 1}").geturl()


_BACKGROUND: dict[str, tuple[Rerun, Path]] = {}  # "run": the run and its JUnit report


def start_in_background(after: Rerun, smokes: list[str]) -> None:
    """Run these smoke tests in a pytest process of their own once `after` has ended;
    each one's test here then reads its outcome from that run's JUnit report."""
    scratch = Path(tempfile.mkdtemp(prefix="raywatch-bench-smokes-"))
    env = {**os.environ, BENCH_BACKGROUND: "1"}
    run = embedded.start_after(after, "bench-smokes", tuple(smokes), env,
                               f"--junitxml={scratch / 'junit.xml'}")
    _BACKGROUND["run"] = (run, scratch / "junit.xml")


def background_outcome(bench: str) -> tuple[bool, str] | None:
    """(passed, why) of this bench in the background run; None when there is none."""
    if "run" not in _BACKGROUND:
        return None
    run, report = _BACKGROUND["run"]
    code, output = run.wait(SMOKE_TIMEOUT_S * len(BENCHES))
    if not report.exists():
        return False, f"the background run left no report (exit {code}):\n{output[-5000:]}"
    for case in ElementTree.parse(report).iter("testcase"):
        if case.get("name") == f"test_bench_runs_in_smoke_mode[{bench}]":
            failure, error = case.find("failure"), case.find("error")
            bad = failure if failure is not None else error
            if bad is None:
                skipped = case.find("skipped")
                return skipped is None, "" if skipped is None else str(skipped.get("message"))
            return False, f"{bad.get('message')}\n{(bad.text or '')[-5000:]}"
    return False, f"{bench} is not in the background run's report:\n{output[-3000:]}"


@pytest.fixture(scope="module")
def bench_env() -> Iterator[dict[str, str]]:
    """BENCH_DATABASE_URL / BENCH_REDIS_URL on the servers `make test` provides."""
    server = urlsplit(os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/x")
    name = f"raywatch_bench_smoke_{os.getpid()}"
    template = f"raywatch_bench_template_{os.getpid()}"  # bench/harness.py keep_as_template
    env = {**os.environ,
           "BENCH_DATABASE_URL": server._replace(path=f"/{name}").geturl(),
           "BENCH_REDIS_URL": redis_url(), "BENCH_TEMPLATE_DATABASE": template}
    yield env
    with psycopg.connect(server._replace(path="/postgres").geturl(), autocommit=True) as conn:
        for database in (name, template):
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(database)))


def figures_of(stdout: str) -> dict[str, object]:
    """The benches' last line: their figures as one JSON object."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return {}
    try:
        figures = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {}
    return figures if isinstance(figures, dict) else {}


def test_every_bench_is_in_make_bench() -> None:
    makefile = (ROOT / "Makefile").read_text()
    target = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert sorted(re.findall(r"bench/(\w+\.py)", target)) == BENCHES


@pytest.mark.parametrize("bench", [pytest.param(b, marks=marks_of(b)) for b in BENCHES])
def test_bench_runs_in_smoke_mode(bench: str, request: pytest.FixtureRequest) -> None:
    outcome = background_outcome(bench)
    if outcome is not None:  # it ran beside the suite
        passed, why = outcome
        assert passed, why
        return
    bench_env = request.getfixturevalue("bench_env")
    code, stdout, stderr = run_smoke([sys.executable, f"bench/{bench}", "--smoke"], bench_env,
                                     SMOKE_TIMEOUT_S)
    why = f"{bench} --smoke:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    assert code is not None, f"{bench} --smoke still running after {SMOKE_TIMEOUT_S:.0f} s: {why}"
    assert code == 0, why
    assert figures_of(stdout), why


# A bench that starts a server in a session of its own, as bench/harness.py served does,
# and never ends.
STARTS_A_SERVER = """
import subprocess, sys, time
server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                          start_new_session=True)
print(server.pid, flush=True)
time.sleep(600)
"""


def test_a_smoke_past_its_time_leaves_nothing_running() -> None:
    code, stdout, _ = run_smoke([sys.executable, "-c", STARTS_A_SERVER], dict(os.environ), 5)
    assert code is None, stdout
    server = int(stdout.split()[0])
    with contextlib.suppress(psutil.NoSuchProcess):  # gone, or a zombie not yet reaped
        assert psutil.Process(server).status() == psutil.STATUS_ZOMBIE, \
            f"the bench's server (pid {server}) still runs after the bench was ended"


def run_smoke(command: list[str], env: dict[str, str],
              timeout_s: float) -> tuple[int | None, str, str]:
    """(exit code, stdout, stderr) of a bench; the code is None when it ran past
    `timeout_s`. Then it is killed with every process below it: the servers a bench starts
    in sessions of their own (bench/harness.py served) are stopped by its own `finally`,
    which a SIGKILL to the bench alone skips, and they would run on beside the suite."""
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        return process.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        family = [psutil.Process(process.pid)]
        with contextlib.suppress(psutil.NoSuchProcess):
            family += family[0].children(recursive=True)
        for member in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()
        psutil.wait_procs(family, timeout=30)
        try:
            stdout, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # a process outside its tree holds its output
            process.stdout.close()  # type: ignore[union-attr]
            process.stderr.close()  # type: ignore[union-attr]
            process.wait()
            stdout, stderr = "", "(its output is held open by a process outside its tree)"
        return None, stdout, stderr
