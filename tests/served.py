"""raywatch started the way docs/deploying.md says, in subprocesses: `manage.py migrate`,
`ensure_admin`, `manage.py serve`; on the embedded default (SQLite, in-memory layer,
in-process scheduler) or the production topology (Postgres, Redis, Celery)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import psycopg

ROOT = Path(__file__).resolve().parent.parent
# What must not leak from the test process into a raywatch it starts: the backend
# choice, a Ray address, pytest-django's settings, Playwright's async escape hatch.
NOT_INHERITED = {"DATABASE_URL", "REDIS_URL", "RAY_ADDRESS", "DJANGO_SETTINGS_MODULE",
                 "DJANGO_ALLOW_ASYNC_UNSAFE"}


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


def first_run(env: dict[str, str]) -> tuple[str, str]:
    """What the documented first start does (`migrate`, `ensure_admin`): the admin's API token
    and the password `ensure_admin` wrote down."""
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "ensure_admin")
    password = (Path(env["RAYWATCH_DATA_DIR"]) / "admin-password.txt").read_text().split()[1]
    return manage(env, "drf_create_token", "admin").split()[2], password


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
        server.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    return log.read_text(errors="replace")
