"""The production topology of docker-compose.yml, run for real: Postgres, Redis,
`serve` (uvicorn) with a Celery worker, notifier and beat polling a real Ray cluster,
and an incident reaching a chat webhook through them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from django.conf import settings

from collectors.localray import LocalCluster, free_port
from tests import served
from tests.agents import agent_env as node_agent_env
from tests.conftest import wait_for
from tests.patience import patient
from tests.served import ROOT, api_get, fake_gpu_spec, manage, manage_all, nodes_or_none

pytestmark = [pytest.mark.beside, pytest.mark.ray]


@pytest.fixture
def scratch_database() -> Iterator[str]:
    """A database of its own, migrated by `manage.py migrate` like a deployment would."""
    with served.scratch_database(os.environ["DATABASE_URL"]) as url:
        yield url


def agent_env(env: dict[str, str], tmp_path: Path, node: str, ip: str, count: int
              ) -> dict[str, str]:
    """A GPU node's agent: its own identity and GPUs (the fake pynvml: no GPU here)."""
    return {**env, "RAYWATCH_NODE_NAME": node, "RAYWATCH_NODE_IP": ip,
            "RAYWATCH_NVML_MODULE": "tests.fake_pynvml",
            "FAKE_NVML_SPEC": fake_gpu_spec(tmp_path / f"{node}.json", node, count)}


def gpu_nodes(port: int, token: str) -> dict[str, set[str]] | None:
    try:
        gpus = api_get(f"http://127.0.0.1:{port}/api/gpus/", token)
    except OSError:
        return None
    found: dict[str, set[str]] = {}
    for gpu in gpus:  # type: ignore[attr-defined]
        found.setdefault(f"{gpu['node']}@{gpu['node_ip']}", set()).add(gpu["uuid"])
    return found if len(found) == 3 else None


OPEN_INCIDENT = """
from django.utils import timezone
from dashboard.alerts.models import Channel
from dashboard.incidents.findings import Finding
from dashboard.incidents.service import sync_findings
# Only this kind: the detectors may open others of their own on the shared Ray cluster.
Channel.objects.create(name="ops", kind="webhook", url="{url}", kinds=["test_stalled"])
finding = Finding("test_stalled", "trial:topo/t1", "critical", "trial t1 stalled", {{}})
sync_findings(["test_stalled"], [finding], timezone.now(),
              {{"trial:topo/t1": {{"experiment": "topo"}}}})
"""


def test_celery_worker_beat_and_agents_feed_the_dashboard(
    tmp_path: Path, scratch_database: str, ray_cluster: LocalCluster, receivers
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"RAY_ADDRESS"}}
    env.update({
        "DATABASE_URL": scratch_database,
        "REDIS_URL": os.environ["REDIS_URL"],
        "RAYWATCH_CHANNEL_PREFIX": f"topology-{uuid.uuid4().hex[:6]}",
        "RAY_API_SERVER_ADDRESS": ray_cluster.dashboard_url,
        "RAYWATCH_DATA_DIR": str(tmp_path),
        "RAYWATCH_POLL_RAY_S": "1",
        "RAYWATCH_POLL_GPU_S": "1",
        "RAYWATCH_WEBHOOK_ALLOW_PRIVATE": "1",  # the test's receiver is on loopback
        "RAYWATCH_ALERT_GROUP_WAIT_S": "0",
        # No trial dirs of this host's other Tune runs: the one incident here is the test's.
        "RAYWATCH_LOG_DIRS": str(tmp_path / "logs"),
    })
    (tmp_path / "logs").mkdir()
    served.migrate(env)
    _, token, *nodes = manage_all(env, ("ensure_admin",), ("drf_create_token", "admin"),
                                  ("agent_token", "gpu-a", "--ip", "10.9.0.2"),
                                  ("agent_token", "gpu-b", "--ip", "10.9.0.3"))
    token, node_tokens = token.split()[2], [n.strip() for n in nodes]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # `serve` runs this host's agent; two more GPU nodes run theirs (make agent), each
    # with the token an admin issued for it.
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)],
                              cwd=ROOT, env=agent_env(env, tmp_path, "head-gpu", "10.9.0.1", 1),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    agents = [subprocess.Popen(
        [sys.executable, "-m", "collectors.agent"], cwd=ROOT, start_new_session=True,
        env=node_agent_env(url, node_token, tmp_path, node, ip, 2))
              for node_token, (node, ip) in zip(node_tokens, (("gpu-a", "10.9.0.2"),
                                                              ("gpu-b", "10.9.0.3")), strict=True)]
    try:
        nodes = wait_for(lambda: nodes_or_none(f"{url}/api/nodes/", token),
                         120, 1, "Celery to poll Ray into Postgres")
        assert nodes[0]["node_id"] == ray_cluster.node_id
        gpus = wait_for(lambda: gpu_nodes(port, token), 120, 1,
                        "three nodes' agents to report their GPUs")
        # Each node's GPUs are stored under that node's identity, never another's.
        assert gpus == {"head-gpu@10.9.0.1": {"GPU-head-gpu-0"},
                        "gpu-a@10.9.0.2": {"GPU-gpu-a-0", "GPU-gpu-a-1"},
                        "gpu-b@10.9.0.3": {"GPU-gpu-b-0", "GPU-gpu-b-1"}}
        children = psutil.Process(server.pid).children(recursive=True)
        commands = [" ".join(c.cmdline()) for c in children]
        roles = {line.split("celery -A dashboard ")[-1].split()[0]
                 for line in commands if "celery -A dashboard " in line}
        roles |= {"beat" for line in commands if "-m dashboard.core.beat " in line}
        assert roles == {"worker", "beat"}
        queues = {" ".join(c.cmdline()).split("--queues ")[-1].split()[0]
                  for c in children if "--queues" in " ".join(c.cmdline())}
        assert queues == {settings.NOTIFY_QUEUE, settings.STACKS_QUEUE}
        assert sum("-m collectors.agent" in line for line in commands) == 1
        # An incident opened by a detector process reaches the chat webhook through the
        # worker (routing) and the notifier (sending).
        receiver = receivers(200)
        manage(env, "shell", "-c", OPEN_INCIDENT.format(url=receiver.url))
        wait_for(receiver.accepted, 60, 0.2, "the incident to reach the webhook")
        time.sleep(2)  # a duplicate send would arrive by now
        titles = [m["title"] for m in receiver.accepted()]
        assert titles == ["[FIRING:1] experiment topo"], titles
    finally:
        server.send_signal(signal.SIGINT)
        for agent in agents:
            agent.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=patient(90))
        for agent in agents:
            agent.wait(patient(30))
    assert "Celery worker, notifier, stacks, beat on REDIS_URL" in output
    assert "this host's node agent" in output
    assert "Traceback" not in output
    gone = psutil.wait_procs(children, timeout=30)[1]
    assert not gone, f"still running after Ctrl-C: {gone}"
