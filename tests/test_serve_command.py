"""`make run`'s server on the embedded default: a local Ray cluster, collectors and
the dashboard in one process; Ctrl-C stops everything it started, nothing else."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import psutil
import pytest

from collectors.localray import free_port
from tests.conftest import wait_for
from tests.patience import patient
from tests.served import (
    ROOT,
    api_get,
    embedded_env,
    fake_gpu_spec,
    manage,
    manage_all,
    migrate,
    nodes_or_none,
)

pytestmark = [pytest.mark.beside, pytest.mark.ray]


def ray_processes_of(session_dir: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(session_dir in part for part in proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_serve_embedded_watches_local_cluster_and_stops_cleanly(tmp_path: Path) -> None:
    env = embedded_env(tmp_path, RAYWATCH_NVML_MODULE="tests.fake_pynvml",
                       FAKE_NVML_SPEC=fake_gpu_spec(tmp_path / "gpus.json", "here", 2))
    migrate(env)
    created = manage(env, "ensure_admin")
    assert "created admin login" in created and (tmp_path / "admin-password.txt").exists()
    again, token = manage_all(env, ("ensure_admin",), ("drf_create_token", "admin"))
    assert "admin login: admin" in again  # a second run keeps it
    token = token.split()[2]

    port = free_port()
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(server.stdout or ()), daemon=True)
    reader.start()
    try:
        nodes = wait_for(
            lambda: nodes_or_none(f"http://127.0.0.1:{port}/api/nodes/", token), 120, 1,
            "the local Ray node to appear in /api/nodes/",
        )
        assert nodes[0]["is_head"] and nodes[0]["state"] == "ALIVE"
        assert nodes[0]["resources"]["CPU"]["total"] == 1.0
        session_dir = json.loads((tmp_path / "local-ray.json").read_text())["session_dir"]
        assert ray_processes_of(session_dir), "the local cluster's processes should be running"
        assert_printed_ray_init_works(printed)
        # This host's GPUs and processes come from the node agent serve started beside
        # itself, the one every node runs, with a token it keeps to itself.
        gpus = wait_for(lambda: api_get(f"http://127.0.0.1:{port}/api/gpus/", token) or None,
                        60, 1, "this host's agent to report its GPUs")
        assert sorted(g["uuid"] for g in gpus) == ["GPU-here-0", "GPU-here-1"]
        head = wait_for(lambda: next((n for n in api_get(
            f"http://127.0.0.1:{port}/api/agents/coverage/", token)["nodes"]
            if n["state"] == "connected"), None), 30, 1, "the head node's agent connected")
        assert head["raywatch_host"] and head["is_head"]
        assert stat.S_IMODE((tmp_path / "agent-token").stat().st_mode) == 0o600
        agents = [p for p in psutil.Process(server.pid).children(recursive=True)
                  if "collectors.agent" in " ".join(p.cmdline())]
        assert len(agents) == 1
    finally:
        server.send_signal(signal.SIGINT)  # what Ctrl-C sends
        server.wait(timeout=90)
        reader.join(10)
    output = "".join(printed)
    assert server.returncode == 0, output
    assert "Traceback" not in output
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in agents)
    assert not (tmp_path / "local-ray.json").exists()
    wait_for(lambda: not ray_processes_of(session_dir), 30, 0.5,
             "the local cluster's processes to exit")


def test_unreachable_postgres_fails_at_start_with_a_clear_message(tmp_path: Path) -> None:
    env = embedded_env(tmp_path, DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/x",
                       RAYWATCH_DB_CONNECT_TIMEOUT_S="2")
    result = subprocess.run([sys.executable, "manage.py", "serve", "--port", str(free_port())],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "cannot connect to the database (Postgres 127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_redis_fails_at_start_with_a_clear_message(tmp_path: Path) -> None:
    env = embedded_env(tmp_path, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    migrate(env)
    result = subprocess.run([sys.executable, "manage.py", "serve", "--port", str(free_port())],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "cannot reach Redis at REDIS_URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_wrong_ray_address_warns_at_start_and_keeps_serving(tmp_path: Path) -> None:
    env = embedded_env(tmp_path, RAY_ADDRESS=f"http://127.0.0.1:{free_port()}")
    migrate(env)
    port = free_port()
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), 60, 0.5, "the server")
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=patient(60))
    assert "Ray: cannot reach http://127.0.0.1" in output
    assert "keeps retrying" in output
    assert "Traceback" not in output


def assert_printed_ray_init_works(printed: list[str]) -> None:
    """What `make run` tells a user to do, done as printed, in a fresh process: the
    environment line, then the ray.init line (without the first, Ray refuses the
    connection with InvalidAuthToken)."""
    text = "".join(printed)
    assert "`make demo`" in text  # a newcomer with nothing to watch learns of the demo
    [env_line] = [line.strip() for line in printed if line.strip().startswith("export ")]
    [call] = re.findall(r"ray\.init\(address='[^']+'\)", text)
    name, value = env_line.removeprefix("export ").split("=", 1)
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"} | {name: value}
    script = f"import ray\n{call}\nprint('CPUs', ray.cluster_resources()['CPU'])\n"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "CPUs 1.0" in done.stdout, done.stderr[-3000:]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False
