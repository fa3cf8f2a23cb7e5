"""The production topology of docker-compose.yml, run for real: Postgres, Redis,
`serve` (uvicorn) with a Celery worker and beat polling a real Ray cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlparse, urlunparse

import psutil
import psycopg
import pytest

from collectors.localray import LocalCluster, free_port
from tests.conftest import wait_for
from tests.test_serve_command import _nodes_or_none, manage

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.ray


@pytest.fixture
def scratch_database() -> str:
    """A database of its own, migrated by `manage.py migrate` like a deployment would."""
    base = urlparse(os.environ["DATABASE_URL"])
    name = f"raywatch_topology_{uuid.uuid4().hex[:8]}"
    admin_url = urlunparse(base._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield urlunparse(base._replace(path=f"/{name}"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_celery_worker_and_beat_feed_the_dashboard(
    tmp_path: Path, scratch_database: str, ray_cluster: LocalCluster
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"RAY_ADDRESS"}}
    env.update({
        "DATABASE_URL": scratch_database,
        "REDIS_URL": os.environ["REDIS_URL"],
        "RAYWATCH_CHANNEL_PREFIX": f"topology-{uuid.uuid4().hex[:6]}",
        "RAY_API_SERVER_ADDRESS": ray_cluster.dashboard_url,
        "RAYWATCH_DATA_DIR": str(tmp_path),
        "RAYWATCH_POLL_RAY_S": "1",
    })
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "ensure_admin")
    token = manage(env, "drf_create_token", "admin").split()[2]
    port = free_port()
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        nodes = wait_for(lambda: _nodes_or_none(f"http://127.0.0.1:{port}/api/nodes/", token),
                         120, 1, "Celery to poll Ray into Postgres")
        assert nodes[0]["node_id"] == ray_cluster.node_id
        children = psutil.Process(server.pid).children(recursive=True)
        roles = {" ".join(c.cmdline()).split("celery -A dashboard ")[-1].split()[0]
                 for c in children if "celery" in " ".join(c.cmdline())}
        assert roles == {"worker", "beat"}
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=90)
    assert "Celery worker and beat on REDIS_URL" in output
    assert "Traceback" not in output
    gone = psutil.wait_procs(children, timeout=30)[1]
    assert not gone, f"still running after Ctrl-C: {gone}"
