"""raywatch started the way docs/deploying.md says, in subprocesses: `manage.py migrate`,
`ensure_admin`, `manage.py serve`; on the embedded default (SQLite, in-memory layer,
in-process scheduler) or the production topology (Postgres, Redis, Celery)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import psycopg

from tests.patience import patient

ROOT = Path(__file__).resolve().parent.parent
# What must not leak from the test process into a raywatch it starts: the backend
# choice, a Ray address, pytest-django's settings, Playwright's async escape hatch.
NOT_INHERITED = {"DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "DJANGO_SETTINGS_MODULE",
                 "DJANGO_ALLOW_ASYNC_UNSAFE"}


# A served raywatch that a test waits on judges in seconds what the shipped defaults judge
# in minutes (those are for real searches): it reads the logs every second, and a stall, a gone
# process, a slow step and a terminate's grace take a few seconds.
QUICK = {
    # Ray's state every 2 s (each poll costs Ray's dashboard some 20 CPU ms per cluster);
    # the trial logs, where a stall shows first, every second.
    "RAYWATCH_POLL_RAY_S": "2", "RAYWATCH_POLL_LOGS_S": "1", "RAYWATCH_POLL_GPU_S": "1",
    "RAYWATCH_STALL_MIN_S": "6", "RAYWATCH_GONE_GRACE_S": "3", "RAYWATCH_SLOW_MIN_EXCESS_S": "2",
    "RAYWATCH_TERMINATE_GRACE_S": "3",
}


@dataclass(frozen=True)
class Raywatch:
    """A raywatch served by `manage.py serve` for a test: its URL, an API token, the
    admin's password and the environment it runs with."""

    url: str
    token: str
    password: str
    env: dict[str, str]

    def api(self, path: str) -> Any:
        """GET an API path; a paginated list's rows."""
        reply = api_get(f"{self.url}{path}", self.token)
        return reply["results"] if isinstance(reply, dict) and "results" in reply else reply


def embedded_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of `make run` on a fresh machine: no DATABASE_URL, no REDIS_URL."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    return {**env, "RAYWATCH_DATA_DIR": str(data_dir), "RAYWATCH_LOCAL_RAY_CPUS": "1", **extra}


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise AssertionError(f"manage.py {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}{done.stderr[-4000:]}")
    return done.stdout


# Several management commands in one Django start, each as `manage.py` runs it (the same
# parser and handle(), through call_command): a start costs 2 to 3 CPU s, and the suite's
# served tests ran some ninety of them, most back to back.
_ALL = """
import contextlib, io, json, os
from django.core.management import call_command
said = []
for args in json.loads(os.environ["RAYWATCH_TEST_COMMANDS"]):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            call_command(*args, stdout=out)
    except BaseException:
        print("".join(said) + out.getvalue() + "manage.py " + " ".join(args) + " failed:")
        raise
    said.append(out.getvalue())
print(RS + json.dumps(said))
"""
_RS = "\x1e"  # ends what the commands printed themselves


def manage_all(env: dict[str, str], *commands: tuple[str, ...]) -> list[str]:
    """`manage.py A ...`, `manage.py B ...`, in order, in one process: what each printed."""
    out = manage({**env, "RAYWATCH_TEST_COMMANDS": json.dumps(commands)}, "shell", "-v", "0",
                 "-c", f"RS = {_RS!r}\n{_ALL}")
    return json.loads(out.rpartition(_RS)[2])


# What the first `manage.py migrate` on each backend made, from an empty database: a
# SQLite file, or a Postgres database to create others from (TEMPLATE). Under `make test`
# the run's pytest processes share them (tests/runner.py sets MIGRATED_DIR_ENV to a dir
# of the run's, and removes what is there at its end); otherwise each process keeps its own.
_MIGRATED: dict[str, str] = {}
SQLITE_FILE = "raywatch.sqlite3"  # the embedded default's database in its data dir (settings.py)
_TEMPLATE_DIR = Path(tempfile.gettempdir()) / f"raywatch-migrated-{os.getpid()}"
MIGRATED_DIR_ENV = "RAYWATCH_TEST_MIGRATED_DIR"
STORE_FILE = "migrated.json"  # in MIGRATED_DIR_ENV's dir: what `migrate` kept there


def migrate(env: dict[str, str]) -> None:
    """`manage.py migrate --noinput` for a raywatch the test starts, on env's empty database.

    The first on each backend in the run (in this pytest process when run alone) runs it,
    from the empty database (what docs/deploying.md's first start does); later ones get a
    copy of what it made, which is the same schema and rows (the migrations are
    deterministic). A run of all 74 migrations costs about 5 CPU s, and the suite starts
    some thirty raywatch processes: that was more CPU than all of its Postgres. A database
    that is not empty is migrated as usual."""
    shared = os.environ.get(MIGRATED_DIR_ENV)
    if not shared:
        _migrate(env, _MIGRATED, _TEMPLATE_DIR, f"raywatch_migrated_{os.getpid()}")
        return
    where = Path(shared)
    where.mkdir(parents=True, exist_ok=True)
    # One process at a time: a second one waits for the first's migrate, then copies.
    with (where / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        store_file = where / STORE_FILE
        store = json.loads(store_file.read_text()) if store_file.exists() else {}
        _migrate(env, store, where, f"raywatch_migrated_{where.parent.name.replace('-', '_')}")
        store_file.write_text(json.dumps(store))


def _migrate(env: dict[str, str], store: dict[str, str], template_dir: Path,
             template_name: str) -> None:
    url = env.get("DATABASE_URL", "")
    if not url:
        target = Path(env["RAYWATCH_DATA_DIR"]) / SQLITE_FILE
        template = store.get("sqlite")
        if template and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, target)
            return
        fresh = not target.exists()
        manage(env, "migrate", "--noinput", "-v", "0")
        if fresh and not template:
            template_dir.mkdir(exist_ok=True)
            store["sqlite"] = str(shutil.copyfile(target, template_dir / SQLITE_FILE))
        return
    if not url.startswith("postgres"):
        manage(env, "migrate", "--noinput", "-v", "0")
        return
    parsed = urlparse(url)
    name, admin_url = parsed.path.lstrip("/"), urlunparse(parsed._replace(path="/postgres"))
    template, fresh = store.get("postgres"), not _has_tables(url)
    if template and fresh:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return
    manage(env, "migrate", "--noinput", "-v", "0")
    if fresh and not template:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{template_name}"')
            conn.execute(f'CREATE DATABASE "{template_name}" TEMPLATE "{name}"')
        store["postgres"] = template_name
        store["postgres_admin"] = admin_url


def _has_tables(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT 1 FROM pg_tables WHERE schemaname = 'public' LIMIT 1"
                            ).fetchone() is not None


def forget_migrated(shared: Path | None = None) -> None:
    """Remove what `migrate` kept: this process's own (at the end of its session), or with
    `shared`, the run's (tests/runner.py, at the run's end). The machine as it was."""
    if shared is None:
        if os.environ.get(MIGRATED_DIR_ENV):
            return  # the run's: the runner removes it once every process is done
        store, where = _MIGRATED, _TEMPLATE_DIR
    else:
        store_file, where = shared / STORE_FILE, shared
        store = json.loads(store_file.read_text()) if store_file.exists() else {}
    shutil.rmtree(where, ignore_errors=True)
    if "postgres" in store:
        with psycopg.connect(store["postgres_admin"], autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{store["postgres"]}" WITH (FORCE)')
    store.clear()


def first_run(env: dict[str, str]) -> tuple[str, str]:
    """What the documented first start does (`migrate`, `ensure_admin`): the admin's API token
    and the password `ensure_admin` wrote down."""
    migrate(env)
    _, token = manage_all(env, ("ensure_admin",), ("drf_create_token", "admin"))
    password = (Path(env["RAYWATCH_DATA_DIR"]) / "admin-password.txt").read_text().split()[1]
    return token.split()[2], password


def api_post(url: str, token: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Token {token}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def api_get(url: str, token: str) -> object:
    request = urllib.request.Request(url, headers={"Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def nodes_or_none(url: str, token: str) -> list | None:
    try:
        nodes = api_get(url, token)
    except OSError:
        return None
    return nodes if nodes else None  # type: ignore[return-value]


@contextmanager
def scratch_database(base_url: str) -> Iterator[str]:
    """A Postgres database of its own beside `base_url`'s, dropped afterwards."""
    base = urlparse(base_url)
    name = f"raywatch_scratch_{uuid.uuid4().hex[:8]}"
    admin_url = urlunparse(base._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunparse(base._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fake_gpu_spec(path: Path, prefix: str, count: int) -> str:
    """A FAKE_NVML_SPEC file for tests/fake_pynvml.py: `count` GPUs named after `prefix`."""
    gpus = [{"uuid": f"GPU-{prefix}-{i}", "util": 10 * (i + 1)} for i in range(count)]
    path.write_text(json.dumps({"gpus": gpus}))
    return str(path)


def start_serve(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """`manage.py serve` in a session of its own, its output written to `log` (a pipe
    nobody reads while the test runs would fill and stop the server)."""
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop_serve(server: subprocess.Popen[bytes], log: Path, timeout_s: float = 90) -> str:
    """Ctrl-C, as a person stops `make run`; what it printed."""
    server.send_signal(signal.SIGINT)
    try:
        server.wait(patient(timeout_s))
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    return log.read_text(errors="replace")
