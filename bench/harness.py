"""What the benchmarks share: the bench database, Django set-up, smoke mode, and printing
figures.

The scripts run as `python bench/NAME.py` from the repository root, so Python puts
bench/ (not the root) on sys.path; the root is added here, once.

Every bench takes `--smoke`: the same code on tiny sizes, seconds a bench, which
`make test` runs (tests/test_benches_smoke.py) so that a bench that no longer runs fails
the suite. Smoke figures mean nothing and nothing judges them.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

T = TypeVar("T")
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/raywatch_bench"
# A fixed key, so the bench process and the ASGI server it starts agree on session hashes
# without writing a key file into the checkout.
BENCH_SECRET_KEY = "raywatch-bench-only-not-a-secret-0123456789-abcdefghijklmnopqrstuvwxyz"


def _smoke_flag() -> bool:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--smoke", action="store_true")
    return bool(parser.parse_known_args()[0].smoke)


# Read once, at import: spawned helper processes get the same argv, hence the same sizes.
SMOKE = _smoke_flag()


def sized(full: T, smoke: T) -> T:
    """`full` for a real run, `smoke` under --smoke."""
    return smoke if SMOKE else full


def database_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)


def django_env(database: str | None = None, **extra: str) -> dict[str, str]:
    """The environment raywatch reads in the bench process and in any server it starts."""
    return {
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "DATABASE_URL": database or database_url(),
        "RAYWATCH_SECRET_KEY": os.environ.get("RAYWATCH_SECRET_KEY", BENCH_SECRET_KEY),
        # Not the checkout's .raywatch: what a run keeps there (the trial-log reader's
        # cursors) would make the next run read nothing.
        "RAYWATCH_DATA_DIR": bench_data_dir(),
        **extra,
    }


_DATA_DIR: list[str] = []


def bench_data_dir() -> str:
    """This bench process's DATA_DIR, made at first use and removed when it exits."""
    if not _DATA_DIR:
        _DATA_DIR.append(tempfile.mkdtemp(prefix="raywatch-bench-data-"))
        atexit.register(shutil.rmtree, _DATA_DIR[0], True)
    return _DATA_DIR[0]


def database_exists(conn: Any, name: str) -> bool:
    """Whether the Postgres server that `conn` (a psycopg connection) reaches has `name`."""
    return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                        (name,)).fetchone() is not None


def ensure_database(url: str) -> None:
    """Create the bench database when it does not exist yet (never drops anything)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = str(conninfo_to_dict(url).get("dbname") or "")
    if not name:
        raise SystemExit(f"bench database URL names no database: {url}")
    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        if not database_exists(conn, name):
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


@contextmanager
def throwaway_database(label: str) -> Iterator[str]:
    """A database of this run's own on the bench server, dropped on the way out (also
    when the bench fails): for benches that load more than a shared database should keep,
    and that must not trip over an older schema left in it."""
    import psycopg
    from psycopg import sql

    base = urlsplit(database_url())
    name = f"raywatch_bench_{label}_{os.getpid()}"
    admin = base._replace(path="/postgres").geturl()
    template = os.environ.get(TEMPLATE_ENV)
    with psycopg.connect(admin, autocommit=True) as conn:
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template and database_exists(conn, template):
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(create)
    try:
        yield base._replace(path=f"/{name}").geturl()
    finally:
        if "django.db" in sys.modules:
            from django.db import connections

            connections.close_all()
        with psycopg.connect(admin, autocommit=True) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(name)))


def setup_django(database: str | None = None, **extra_env: str) -> dict[str, str]:
    """Point raywatch at the bench database (or `database`), migrate it, and return the
    environment used."""
    env = django_env(database, **extra_env)
    os.environ.update(env)
    ensure_database(env["DATABASE_URL"])

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    keep_as_template(env["DATABASE_URL"])
    return env


# The smoke run (tests/test_benches_smoke.py) names a database here, which it drops at its
# end: the first bench that migrates a throwaway database leaves a copy of it under that
# name, and the later ones start from that copy instead of migrating an empty database
# (about 3 CPU s a bench; the migrate that follows finds nothing to do).
TEMPLATE_ENV = "BENCH_TEMPLATE_DATABASE"


def keep_as_template(url: str) -> None:
    """Copy the freshly migrated database at `url` to BENCH_TEMPLATE_DATABASE, when that
    is set and does not exist yet. Postgres copies only a database nobody is connected to:
    Django's connections are closed first (they reopen when next used)."""
    template = os.environ.get(TEMPLATE_ENV)
    if not template or not url.startswith("postgres"):
        return
    import psycopg
    from django.db import connections
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    source = str(conninfo_to_dict(url).get("dbname") or "")
    connections.close_all()
    with psycopg.connect(make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        if database_exists(conn, template):
            return
        # Another bench made it first, or still holds the source: no copy this time.
        with suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.ObjectInUse):
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(template), sql.Identifier(source)))


def seconds(call: Callable[[], object]) -> float:
    """How long `call()` took, wall clock, in seconds to the millisecond."""
    started = time.perf_counter()
    call()
    return round(time.perf_counter() - started, 3)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_json(figures: dict[str, Any]) -> None:
    """The same figures as one machine-readable line, always the last line printed."""
    print(json.dumps(figures, sort_keys=True), flush=True)


def tree_cpu_seconds(process: Any) -> float:
    """CPU seconds (user + system) of a psutil.Process and its live descendants."""
    import psutil

    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def answers(url: str) -> bool:
    """Whether `url` answers 200 (a server the bench started is up)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@contextmanager
def worktree(rev: str, tmp: Path) -> Iterator[Path]:
    """A checkout of `rev` beside this one (git worktree), removed afterwards: the
    baseline a bench measures in the same run."""
    path = tmp / "baseline"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path),
                    rev], check=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                       check=False)


@contextmanager
def served(env: dict[str, str], log: Path, *args: str, source: Path = REPO,
           start_s: float = 120) -> Iterator[str]:
    """`manage.py serve` of `source` (this checkout, or a baseline's worktree) on a free
    port, its output in `log`: its base URL once /healthz answers; stopped as Ctrl-C
    stops it (then killed, if it hangs)."""
    from collectors.localray import free_port

    port = free_port()
    with log.open("ab") as out:
        server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port),
                                   *args], cwd=source, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + start_s
        while not answers(f"http://127.0.0.1:{port}/healthz"):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"raywatch ({source}) did not start; see {log}")
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
