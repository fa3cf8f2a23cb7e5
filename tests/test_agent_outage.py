"""A node agent against raywatch started the documented way (`manage.py serve`:
docs/deploying.md), on the embedded default (SQLite) and on Postgres: its GPUs show, it
keeps spooling while raywatch is down and, once raywatch is back, every poll is stored
exactly once; and a trial on its node is terminated through it, with its steps in the
audit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from collectors.localray import free_port
from tests import served
from tests.agents import agent_env, running_agent
from tests.conftest import wait_for
from tests.served import (
    api_get,
    api_post,
    embedded_env,
    manage,
    manage_all,
    start_serve,
    stop_serve,
)

pytestmark = pytest.mark.beside

# raywatch is down this long, three times the agent's backoff cap: it reaches the cap and
# keeps trying at it, as over the minute with the shipped 30 s cap, whose value
# only stretches the outage (and the wait after it) here.
BACKOFF_CAP_S = 4
OUTAGE_S = 3 * BACKOFF_CAP_S
NODE, NODE_IP = "gpu-b", "10.9.0.3"
SAMPLES = """
import json
from dashboard.gpus.models import Gpu, GpuSample
print(json.dumps({g.uuid: [s.at.timestamp() for s in GpuSample.objects.filter(gpu_id=g.pk)]
                  for g in Gpu.objects.all()}))
"""
# The trial, and Ray's view of its actor on node B as raywatch's Ray poll stores it (what
# ties the trial to the process: the pid in its results alone is not enough); its pk.
TRIAL = """
from datetime import timedelta
from django.utils import timezone
from dashboard.cluster.models import Actor, Node
from dashboard.trials.models import Experiment, Trial
now = timezone.now()
Node.objects.create(node_id="b" * 56, node_ip="{ip}", hostname="{node}", state="ALIVE",
                    last_seen_at=now)
Actor.objects.create(actor_id="a" * 32, state="ALIVE", pid={pid}, node_id="b" * 56,
                     repr_name="train", first_seen_at=now, updated_at=now)
trial = Trial.objects.create(
    experiment=Experiment.objects.create(name="search"), trial_id="t_00001", trainable="train",
    status=Trial.RUNNING, pid={pid}, hostname="{node}", node_ip="{ip}", iteration=3,
    last_result_at=now - timedelta(minutes=5))
print(trial.pk)
"""


@pytest.fixture(params=["embedded", "postgres"])
def raywatch_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """`make run`'s environment (no Ray started: the agent is what this is about), on
    SQLite, or on a Postgres database of its own."""
    (tmp_path / "logs").mkdir()
    env = embedded_env(tmp_path / "data", RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{free_port()}",
                       RAYWATCH_GPU_SOURCE="off", RAYWATCH_LOG_DIRS=str(tmp_path / "logs"),
                       RAYWATCH_RAY_TMP_DIR=str(tmp_path / "logs"),
                       RAYWATCH_TERMINATE_GRACE_S="20")
    if request.param == "embedded":
        yield env
        return
    with served.scratch_database(os.environ["DATABASE_URL"]) as url:
        yield {**env, "DATABASE_URL": url}


@pytest.fixture
def ray_worker_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process that looks like a Ray worker to the agent (Ray renames its workers
    'ray::<Class>.<method>'), hung."""
    process = subprocess.Popen(["bash", "-c", "exec -a ray::ImplicitFunc.train sleep 600"])
    yield process
    process.kill()
    process.wait()


def spooled(spool: Path) -> int:
    return len(list(spool.glob("*.batch.json")))


def test_an_agent_rides_out_a_restart_and_signals_its_nodes_processes(  # type: ignore[no-untyped-def]
        raywatch_env: dict[str, str], tmp_path: Path, ray_worker_process) -> None:
    env = raywatch_env
    served.migrate(env)
    _, api_token, node_token = manage_all(env, ("ensure_admin",), ("drf_create_token", "admin"),
                                          ("agent_token", NODE, "--ip", NODE_IP))
    api_token, node_token = api_token.split()[2], node_token.strip()
    port = free_port()
    url, log = f"http://127.0.0.1:{port}", tmp_path / "serve.log"
    node = {**agent_env(url, node_token, tmp_path, NODE, NODE_IP),
            "RAYWATCH_AGENT_BACKOFF_CAP_S": str(BACKOFF_CAP_S)}
    spool = Path(node["RAYWATCH_AGENT_SPOOL"])
    server = start_serve(env, port, log)
    try:
        with running_agent(node, tmp_path / "agent.log"):
            gpus = wait_for(lambda: len(g := _gpus(url, api_token)) == 2 and g, 120, 0.5,
                            "the agent's GPUs", explain=lambda: log.read_text()[-3000:])
            assert gpus == {"GPU-gpu-b-0": (NODE, NODE_IP), "GPU-gpu-b-1": (NODE, NODE_IP)}

            stop_serve(server, log)
            down_at = time.time()
            time.sleep(OUTAGE_S)
            assert spooled(spool) >= OUTAGE_S - 2  # it kept polling into its spool
            server = start_serve(env, port, log)
            up_at = time.time()
            wait_for(lambda: spooled(spool) <= 1 and _gpus(url, api_token), 120, 0.5,
                     "the spool to drain into the restarted raywatch")

            trial = manage(env, "shell", "-c", TRIAL.format(pid=ray_worker_process.pid,
                                                            node=NODE, ip=NODE_IP)).split()[-1]
            action = api_post(f"{url}/api/trials/{trial}/terminate", api_token,
                          {"reason": "hung on node B"})
            wait_for(lambda: ray_worker_process.poll() is not None, 60, 0.2,
                     "the agent to end the trial's process")
            assert ray_worker_process.returncode == -signal.SIGTERM
            done = wait_for(lambda: _action(url, api_token, action["action_id"]), 60, 0.5,
                            "the action's outcome")
        state = json.loads((spool / "state.json").read_text())
        sent = state["next_seq"] - 1 - spooled(spool)
        samples = json.loads(manage(env, "shell", "-v", "0", "-c", SAMPLES).splitlines()[-1])
    finally:
        stop_serve(server, log)

    assert done["state"] == "succeeded", done
    steps = [(s["step"], s["detail"]) for s in done["steps"]]
    assert [name for name, _ in steps][:6] == ["requested", "agent_command", "agent_result",
                                               "signalled", "gone", "succeeded"], steps
    assert "SIGTERM to pid" in steps[1][1] and f"agent of {NODE}" in steps[2][1]
    assert "signalled: SIGTERM sent" in steps[2][1]

    # Every poll the agent sent is stored once: none lost in the outage, none doubled.
    assert state["dropped"] == 0 and state["rejected"] == 0
    for uuid, times in samples.items():
        times.sort()
        assert len(times) == len(set(times)) == sent, uuid
        assert times[0] < down_at and times[-1] > up_at
        gaps = [b - a for a, b in pairwise(times)]
        assert max(gaps) < 2.5, f"{uuid}: a hole of {max(gaps):.1f} s"


def _gpus(url: str, token: str) -> dict[str, tuple[str, str]]:
    try:
        listed = api_get(f"{url}/api/gpus/", token)
    except OSError:
        return {}
    return {g["uuid"]: (g["node"], g["node_ip"]) for g in listed}  # type: ignore[attr-defined]


def _action(url: str, token: str, action_id: int) -> dict | None:
    action = api_get(f"{url}/api/actions/{action_id}/", token)
    return action if action["state"] not in ("requested", "signalled") else None  # type: ignore[index]
