"""On SQLite (`make run`'s embedded default, or a DATABASE_URL=sqlite:/// file) with the
scheduler's threads in the web process, the API keeps answering writes and reads
while the scheduler writes GPU samples, source health and incidents several times a
second: every request succeeds and nothing reports "database is locked" (WAL, a busy
timeout and transactions that take the write lock up front: settings.SQLITE_OPTIONS).
Without them the scheduler's writes fail within seconds, as they did for a sqlite:///
DATABASE_URL before it got the same options."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from collectors.localray import free_port
from tests.conftest import wait_for
from tests.served import (
    api_get,
    embedded_env,
    fake_gpu_spec,
    manage_all,
    migrate,
    start_serve,
    stop_serve,
)

WRITES, READS, CLIENTS = 150, 150, 12
READ_PATHS = ("/api/gpus/", "/api/silences/", "/api/alerts/", "/api/sources/", "/api/audit/")


def call(url: str, token: str, body: dict | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={
        "Authorization": f"Token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            reply.read()
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def silence(n: int) -> dict[str, str]:
    ends = datetime.now(UTC) + timedelta(hours=1)
    return {"subject": f"gpu:GPU-busy-{n}", "ends_at": ends.isoformat(),
            "comment": f"maintenance window {n}"}


@pytest.mark.parametrize("database", ["embedded default", "DATABASE_URL=sqlite:///"])
def test_concurrent_requests_while_the_scheduler_writes(tmp_path: Path, database: str) -> None:
    extra = {"DATABASE_URL": f"sqlite:///{tmp_path}/url.sqlite3"} if "URL" in database else {}
    env = embedded_env(
        tmp_path, RAY_ADDRESS=f"http://127.0.0.1:{free_port()}",  # no Ray: its poll fails
        RAYWATCH_GPU_SOURCE="nvml", RAYWATCH_NVML_MODULE="tests.fake_pynvml",
        FAKE_NVML_SPEC=fake_gpu_spec(tmp_path / "gpus.json", "busy", 8),
        RAYWATCH_POLL_GPU_S="0.2", RAYWATCH_POLL_RAY_S="0.2", RAYWATCH_POLL_LOGS_S="0.2",
        RAYWATCH_LOG_DIRS=str(tmp_path / "ray_results"), **extra)
    migrate(env)
    _, token = manage_all(env, ("ensure_admin",), ("drf_create_token", "admin"))
    token = token.split()[2]
    port, log = free_port(), tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    server = start_serve(env, port, log)
    try:
        # The scheduler is writing: GPU samples arrive.
        wait_for(lambda: _gpus(url, token) == 8, 90, 0.5, "the fake GPUs to be polled")
        jobs = ([("POST", "/api/silences/", silence(n)) for n in range(WRITES)]
                + [("GET", READ_PATHS[n % len(READ_PATHS)], None) for n in range(READS)])
        jobs = jobs[::2] + jobs[1::2]  # writes and reads interleaved
        with ThreadPoolExecutor(CLIENTS) as pool:
            statuses = list(pool.map(lambda j: (j[0], call(url + j[1], token, j[2])), jobs))
        silences = api_get(f"{url}/api/silences/?page_size=1000", token)
    finally:
        output = stop_serve(server, log)
    assert sorted(set(statuses)) == [("GET", 200), ("POST", 201)], _failed(statuses, output)
    assert len(silences) == WRITES  # type: ignore[arg-type]
    assert "database is locked" not in output, output[-4000:]
    assert "Traceback" not in output, output[-4000:]


def _gpus(url: str, token: str) -> int:
    try:
        return len(api_get(f"{url}/api/gpus/", token))  # type: ignore[arg-type]
    except OSError:
        return 0


def _failed(statuses: list[tuple[str, int]], output: str) -> str:
    bad = [s for s in statuses if s not in (("GET", 200), ("POST", 201))]
    return f"{len(bad)} of {len(statuses)} failed: {sorted(set(bad))}\n{output[-4000:]}"
