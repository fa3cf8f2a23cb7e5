"""`make test`: make sure Chromium, Postgres and Redis are there, then run pytest.

Postgres and Redis come from DATABASE_URL and REDIS_URL, defaulting to the
standard local ports. If nothing answers there, throwaway instances are started
from the installed binaries and removed afterwards; if there are none, this
says what to install. pytest's "no tests ran" (exit 5) counts as a failure.

Where a test runs is its file's marks, declared once in pyproject.toml
([tool.pytest.ini_options] markers) and set in the file, e.g.
`pytestmark = [pytest.mark.beside, pytest.mark.ray]`; there is no list to keep:

- `beside`: the file mostly waits (on raywatch, the demo or Celery started as processes
  of their own, or on a real Tune search of several minutes). The whole suite runs as
  four pytest processes at once (RUNS): `-m "not beside and not ray and not browser"`,
  `-m "not ray and (browser or beside)"` (a process that starts no Ray cluster: the
  Chromium tests, and the `beside` files that need no Ray), `-m "not beside and ray"`
  and `-m "beside and ray"`, each with its own test database, Redis db, data dir and, if
  it has Ray tests, Ray cluster; the last line counts all four. Mark by duration
  (--durations, and the slowest files the run prints), so that they take about the same
  time.
- `both_backends`: the file's code path makes queries of its own (ORM lookups, raw SQL,
  bulk writes, locking); tests/test_on_embedded_default.py runs `-m "both_backends and
  not ray"` again on the embedded default's SQLite, in the background of the main process.
- `ray`, `browser`: what the tests need (a real local Ray cluster, Chromium). A test that
  uses the session's cluster (the `ray_cluster` fixture) carries `ray`, and one that
  uses the `browser` fixture (or `page`) carries `browser`, without being marked by hand
  (tests/conftest.py).
- The bench smokes (tests/test_benches_smoke.py) take every script in bench/, and mark each
  by what its code starts.

Named files or tests (or -m / -k) run in one process, exactly as asked.
`python -m tests.runner --plan [pytest args]` prints which files each process would get
(pytest's own collection) and runs nothing.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from xml.etree import ElementTree

from tests import served

CHROMIUM = "/usr/bin/chromium"
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/raywatch"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"


def say(msg: str) -> None:
    print(f"[make test] {msg}", flush=True)


def fail(msg: str) -> None:
    print(f"[make test] ERROR: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_chromium() -> None:
    if Path(CHROMIUM).exists():
        return
    say("Debian Chromium is missing; installing it with apt-get (browser tests need it)")
    if os.geteuid() != 0:
        fail("run `sudo apt-get install -y chromium` (Debian's package), then `make test` again")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    result = subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"], env=env
    )
    if result.returncode != 0 or not Path(CHROMIUM).exists():
        fail("could not install Debian's chromium package: install it by hand")


def _as_postgres(cmd: list[str]) -> list[str]:
    # Postgres refuses to run as root.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start_throwaway_postgres(stack: ExitStack) -> str:
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = bins[-1] if bins else shutil.which("initdb")
    if not initdb:
        fail("no Postgres answers at DATABASE_URL and no Postgres binaries are installed: "
             "`apt-get install postgresql`, or set DATABASE_URL to a server you have")
    bindir = Path(initdb).parent
    root = Path(tempfile.mkdtemp(prefix="raywatch-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    stack.callback(shutil.rmtree, root, True)
    port = free_port()
    say(f"no Postgres answers; starting a throwaway one on port {port} in {root}")
    subprocess.run(_as_postgres([str(initdb), "-D", str(root / "data"), "-A", "trust",
                                 "-U", "postgres"]), check=True, stdout=subprocess.DEVNULL)
    server = subprocess.Popen(_as_postgres([
        str(bindir / "postgres"), "-D", str(root / "data"), "-p", str(port),
        "-k", str(root), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
    ]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stack.callback(_stop, server)
    _wait_for("127.0.0.1", port, "Postgres")
    return f"postgres://postgres@127.0.0.1:{port}/raywatch"


def start_throwaway_redis(stack: ExitStack) -> str:
    binary = shutil.which("redis-server")
    if not binary:
        fail("no Redis answers at REDIS_URL and redis-server is not installed: "
             "`apt-get install redis-server`, or set REDIS_URL to a server you have")
    port = free_port()
    say(f"no Redis answers; starting a throwaway one on port {port}")
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    stack.callback(_stop, server)
    _wait_for("127.0.0.1", port, "Redis")
    return f"redis://127.0.0.1:{port}/15"


def _wait_for(host: str, port: int, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answers(host, port):
            return
        time.sleep(0.2)
    fail(f"the throwaway {what} did not start on port {port}")


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()


# The split of the whole suite between its processes: by the files' marks, four of them.
# Measured 2026-11-29 on this 2-core machine, the same code: with two (`beside` or not)
# each was a chain of about 19 minutes of tests that mostly wait (on Tune searches,
# servers, Ray), the cores 80-82% busy, and `make test` took 1,150-1,188 s; with these
# three (the tests that need Ray and are not `beside`, 52, make the third, which starts
# that part's one Ray cluster, so the first starts none) it took 999 s (main 992, ray 831,
# beside 979), the cores 92% busy, with less CPU in all (1,838 s). An earlier split into
# four (each of the two halves again by Ray or Chromium) was no faster: two more Ray
# clusters, on cores already 84% busy. Past this, the suite is bound by its CPU.
# 2026-11-30, on a faster two-core machine (0.74 CPU s for the reference loop): 965 s
# with three (main 957, beside 924, ray 821; 1,735 CPU s), main a chain of 813 tests.
# Its Chromium tests (browser, and neither beside nor ray: 261 s of it) make a fourth,
# which starts no Ray cluster: 961 s (main 916, browser 434, ray 872, beside 957, the
# cores 94% busy), before test_browser_trial_terminate (53 s, no Ray) left `beside`.
# 2026-11-30, a clean clone on a two-core machine (0.40 CPU s for the loop): 851 s (main
# 792, browser 386, ray 770, beside 845), then 803 s (1,512 CPU s; main 796, browser 513,
# ray 771, beside 757) once the `beside` files that need no Ray (test_agent_outage, 73 s)
# ran in the process that starts none.
RUNS = (("main", ("-m", "not beside and not ray and not browser")),  # shown as it goes
        ("browser", ("-m", "not ray and (browser or beside)")),
        ("ray", ("-m", "not beside and ray")),
        ("beside", ("-m", "beside and ray")))


# pytest options whose value is the next argument: a plugin, an ini override, a config
# file... `-p cpuprof` asks for no test by itself.
TAKES_VALUE = frozenset({"-p", "-o", "-c", "-W", "--rootdir", "--confcutdir", "--basetemp",
                         "--durations", "--durations-min", "--maxfail", "--timeout"})


def as_asked(argv: list[str]) -> bool:
    """Files or tests named, or a selection (-m, -k): one process runs exactly that."""
    value_of_option = False
    for arg in argv:
        if value_of_option:
            value_of_option = False
        elif arg[:2] in ("-m", "-k") or not arg.startswith("-"):
            return True
        elif arg in TAKES_VALUE:
            value_of_option = True
    return False


def main(argv: list[str]) -> int:
    if "--plan" in argv:
        return plan([arg for arg in argv if arg != "--plan"])
    ensure_chromium()
    return run_suite(argv)


def run_suite(argv: list[str]) -> int:
    with ExitStack() as stack:
        db_url = os.environ.get("DATABASE_URL") or DEFAULT_DB
        parsed = urlparse(db_url)
        if not answers(parsed.hostname or "127.0.0.1", parsed.port or 5432):
            db_url = start_throwaway_postgres(stack)
        redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS
        parsed = urlparse(redis_url)
        if not answers(parsed.hostname or "127.0.0.1", parsed.port or 6379):
            redis_url = start_throwaway_redis(stack)
        say(f"Postgres {urlparse(db_url).netloc}, Redis {urlparse(redis_url).netloc}")
        say(machine_speed())
        began, cpu = time.monotonic(), busy_cpu_s()
        stack.callback(lambda: say(took(time.monotonic() - began, busy_cpu_s() - cpu)))
        # Everything the run writes to a temporary place (pytest's tmp_path, data dirs,
        # JUnit reports, the clusters' and servers' temp files, the pymp-* dirs Ray's
        # dashboard leaves behind when its cluster stops) lives under one dir, removed
        # when the run passes: a run leaves the machine as it found it. Short: Ray's
        # socket paths can live under it.
        scratch = Path(tempfile.mkdtemp(prefix="rwtest-"))
        stack.callback(tidy, scratch, codes := [])
        # The databases the run's first `migrate` on each backend made, which its pytest
        # processes copy (tests/served.py `migrate`): removed once all of them are done.
        stack.callback(served.forget_migrated, scratch / "migrated")
        if as_asked(argv):
            codes.append(pytest_run(argv, db_url, redis_url, scratch / "run").wait())
            return verdict(codes)
        names = [name for name, _ in RUNS]
        say(f"{len(RUNS)} pytest processes at once, by marks: "
            + "; ".join(f"{name} ({' '.join(sel)})" for name, sel in RUNS)
            + f". The others' output follows {names[0]}'s (as it goes: "
            + ", ".join(str(scratch / f"{name}.log") for name in names[1:]) + ")")
        with ExitStack() as sinks:
            runs = []
            for index, (name, selection) in enumerate(RUNS):
                sink = None if index == 0 else sinks.enter_context(
                    (scratch / f"{name}.log").open("wb"))
                runs.append(pytest_run(
                    [*argv, f"--junitxml={scratch / f'{name}.xml'}", *selection],
                    other_database(db_url, name) if index else db_url,
                    other_redis_db(redis_url, index), scratch / name, sink))
            codes += [run.wait() for run in runs]
        for name, selection in RUNS[1:]:
            print(f"\n[make test] ===== beside the main run: {name} ({' '.join(selection)}) "
                  "=====", flush=True)
            print((scratch / f"{name}.log").read_text(errors="replace"), flush=True)
        reports = [scratch / f"{name}.xml" for name in names]
        print(slowest(reports), flush=True)
        for line in failures(reports):
            print(line, flush=True)
        print(totals(reports), flush=True)
        for name, code in zip(names, codes, strict=True):
            if code < 0:
                print(f"[make test] ERROR: the {name} pytest process was ended by "
                      f"{signal.Signals(-code).name} (its output above says where)",
                      flush=True)
        return verdict(codes)


# The suite's minutes follow the machine's speed, which differs from one machine of the
# same size to the next (a run took 999 s on one two-core machine and 1,488 s on another):
# each run says how fast its machine is and how busy it kept the cores, to compare runs by.
REFERENCE_LOOP = 20_000_000


def machine_speed() -> str:
    began, total = time.process_time(), 0
    for i in range(REFERENCE_LOOP):
        total += i
    return (f"this machine: {os.cpu_count()} cores; a reference loop ({REFERENCE_LOOP:,} "
            f"additions in CPython) took {time.process_time() - began:.2f} CPU s")


def busy_cpu_s() -> float:
    """The machine's busy CPU seconds since boot, all cores (/proc/stat: user, nice,
    system, irq, softirq); 0 without it."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:7]) - idle) / os.sysconf("SC_CLK_TCK")  # steal (the 8th) is not ours


def took(wall_s: float, cpu_s: float) -> str:
    cores = os.cpu_count() or 1
    busy = f", the cores {100 * cpu_s / (wall_s * cores):.0f}% busy ({cpu_s:,.0f} CPU s)" \
        if cpu_s > 0 and wall_s > 0 else ""
    return f"the run took {wall_s:,.0f} s{busy}"


def plan(argv: list[str]) -> int:
    """Print the files each pytest process of this run would get, and the SQLite rerun's
    when the embedded-default test is among them; collects only, runs nothing."""
    from tests.test_on_embedded_default import RERUN

    runs = [("one process, as asked", argv)] if as_asked(argv) else [
        (f"{name} process ({' '.join(selection)})", [*argv, *selection])
        for name, selection in RUNS]
    codes, seen = [], set()
    for title, args in runs:
        code, files = show_collection(title, args, dict(os.environ))
        codes.append(code)
        seen.update(files)
    if "tests/test_on_embedded_default.py" in seen:
        sqlite_env = {k: v for k, v in os.environ.items()
                      if k not in ("DATABASE_URL", "REDIS_URL")}
        codes.append(show_collection(
            f"SQLite rerun, in the background of tests/test_on_embedded_default.py's process "
            f"({' '.join(RERUN)})", list(RERUN), sqlite_env)[0])
    return verdict(codes)


def show_collection(title: str, args: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """Print the files `pytest args` collects; (pytest's exit code, the files)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, env=env)
    if done.returncode not in (0, 5):
        print(f"[make test] {title}: pytest exit {done.returncode}", flush=True)
        print(*done.stdout.splitlines()[-15:], done.stderr[-3000:], sep="\n", flush=True)
        return done.returncode, []
    count: dict[str, int] = {}  # file: its tests (-q lists each test, -qq each file's count)
    for line in done.stdout.splitlines():
        if m := re.match(r"([^\s:]+\.py)(?:::|: (\d+)$)", line):
            count[m.group(1)] = count.get(m.group(1), 0) + int(m.group(2) or 1)
    print(f"[make test] {title}: {sum(count.values())} tests in {len(count)} files", flush=True)
    for name in sorted(count):
        print(f"    {name} ({count[name]})", flush=True)
    files = sorted(count)
    return done.returncode, files


def tidy(scratch: Path, codes: list[int]) -> None:
    """Remove the run's temporary files when it passed; keep them for a look otherwise."""
    if codes and all(code == 0 for code in codes):
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        say(f"kept the run's temporary files for a look (tmp_path of each test, logs, JUnit "
            f"reports): {scratch}")


def pytest_run(args: list[str], db_url: str, redis_url: str, tmp: Path, stdout: Any = None
               ) -> subprocess.Popen[bytes]:
    # Python's bytecode caches (__pycache__/, ignored by git) are written as on any Python
    # run: where the machine sets PYTHONDONTWRITEBYTECODE, each of the suite's hundreds of
    # Python processes (manage.py, agents, Celery, benches) compiled raywatch's modules
    # again, about 0.15 CPU s each, and pytest rewrote every test file's asserts again.
    inherited = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    (tmp / "data").mkdir(parents=True)
    env = {**inherited, "DATABASE_URL": db_url, "REDIS_URL": redis_url,
           "TMPDIR": str(tmp), "RAYWATCH_DATA_DIR": str(tmp / "data"),
           served.MIGRATED_DIR_ENV: str(tmp.parent / "migrated"),
           # Server threads in the tests must not hold the test database open.
           "RAYWATCH_DB_CONN_MAX_AGE": "0",
           # A crash, even after the last test (while the interpreter shuts down), prints
           # every thread's Python stack.
           "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([sys.executable, "-m", "pytest", *args], env=env, stdout=stdout,
                            stderr=subprocess.STDOUT if stdout is not None else None)


def slowest(reports: list[Path], shown: int = 15) -> str:
    """The files that took longest, from the runs' JUnit reports: where the suite's
    minutes go (what to mark `beside`, or to make cheaper)."""
    took: dict[str, float] = {}
    for case in _cases(reports):
        # "tests.test_x" or "tests.test_x.TestClass": the file is the first two parts.
        name = ".".join(case.get("classname", "").split(".")[:2])
        took[name] = took.get(name, 0.0) + float(case.get("time") or 0)
    top = sorted(took.items(), key=lambda kv: -kv[1])[:shown]
    return "[make test] slowest files (s): " + ", ".join(f"{n} {t:.0f}" for n, t in top)


def failures(reports: list[Path], chars: int = 800) -> list[str]:
    """Each failed test and how it failed (pytest's message, its last lines), gathered at
    the end: a batch's FAILURES section sits in the middle of a long log, and a CI page
    that shows only part of it shows the test's source rather than its assertion."""
    lines = []
    for case in _cases(reports):
        for bad in [*case.iter("failure"), *case.iter("error")]:
            text = (bad.text or "").rstrip()
            said = bad.get("message") or ""
            tail = text[-chars:] if text else said[:chars]
            lines.append(f"[make test] FAILED {case.get('classname')}::{case.get('name')}"
                         f": {said[:chars]}\n{tail}")
    return lines


def _cases(reports: list[Path]) -> Iterator[ElementTree.Element]:
    """The test cases of the JUnit reports that could be read."""
    for report in reports:
        try:
            yield from list(ElementTree.parse(report).getroot().iter("testcase"))
        except (OSError, ElementTree.ParseError):
            continue


def totals(reports: list[Path]) -> str:
    """The runs' counts in one line, from their JUnit reports."""
    count = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for report in reports:
        try:
            suites = ElementTree.parse(report).getroot().iter("testsuite")
        except (OSError, ElementTree.ParseError):
            return f"[make test] ERROR: no test report at {report}"
        for suite in suites:
            for key in count:
                count[key] += int(suite.get(key, 0))
    failed = count["failures"] + count["errors"]
    passed = count["tests"] - failed - count["skipped"]
    return f"raywatch: {passed} passed, {failed} failed, {count['skipped']} skipped"


def other_database(url: str, name: str) -> str:
    parsed = urlparse(url)
    return parsed._replace(path=f"{parsed.path.rstrip('/') or '/raywatch'}_{name}").geturl()


def other_redis_db(url: str, index: int) -> str:
    """The run's Redis db: the main run's (index 0), then one db lower for each other
    run, past the one just below the main run's: that belongs to the bench smokes that
    the main run starts in the background, and they flush it."""
    if index == 0:
        return url
    parsed = urlparse(url)
    db = int(parsed.path.strip("/") or 0)
    below = db - 1 - index
    return parsed._replace(path=f"/{below if below >= 0 else db + 1 + index}").geturl()


def verdict(codes: list[int]) -> int:
    """pytest's "no tests ran" (exit 5) counts as a failure; any other failure wins."""
    if 5 in codes:
        print("[make test] ERROR: pytest collected no tests: that is a failure",
              file=sys.stderr, flush=True)
        return 1
    failed = next((code for code in codes if code != 0), 0)
    return 128 - failed if failed < 0 else failed  # as a shell says a signal: 128 + n


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
