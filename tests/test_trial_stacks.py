"""Where a hung trial hangs, and whether it is busy, on a real Tune search on a real Ray
cluster: its trial_stalled incident carries the Python stack of the hanging frame, taken
when the incident opened by the node's agent process (py-spy), and busy or idle as the
agent measured it. When the agent is gone, Ray's reporter tells busy from idle, and the
incident says why no stack could be taken (Ray's real 403: profiling is off). On a Ray
head started with RAY_DASHBOARD_ENABLE_PROFILING=1, Ray's /worker/traceback gives it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from collectors.hostinfo import host_name
from collectors.pystack import BUSY_PERCENT
from dashboard.agents import tokens
from dashboard.agents.models import NodeProcess
from dashboard.cluster.models import Actor
from dashboard.cluster.tasks import poll_ray_state
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, Trial, TrialStack
from dashboard.trials.stacks import request_stack, stack_payload
from tests.agents import agent_env, running_agent
from tests.conftest import (
    LiveServer,
    port_flags,
    start_search,
    stop_node,
    stop_ray_start,
    token_client,
    wait_for,
    worker_ports,
)
from tests.patience import patient

pytestmark = [pytest.mark.ray, pytest.mark.django_db(transaction=True)]


def trial_with(experiment: str, behaviour: str) -> Trial | None:
    return Trial.objects.filter(experiment__name=experiment, config__behaviour=behaviour).first()


def stall_of(trial: Trial) -> dict[str, Any]:
    """The details of the trial's firing trial_stalled incident ({} while there is none)."""
    found = Incident.objects.filter(kind="trial_stalled", trial=trial, state="firing").first()
    return found.details if found else {}


def stall_where(trial: Trial, test: Any, what: str, timeout_s: float = 90) -> dict[str, Any]:
    return wait_for(lambda: (d := stall_of(trial)) and test(d) and d, timeout_s, 0.5, what,
                    explain=lambda: stall_of(trial))  # type: ignore[return-value]


@pytest.fixture
def stack_settings(settings, watched):  # type: ignore[no-untyped-def]
    settings.EMBEDDED = True  # stacks are taken in this process's background pool
    settings.AGENT_STALE_S = patient(8.0)  # > the 5 s between last_seen_at writes
    return settings


def test_a_hung_trials_incident_shows_where_it_hangs_and_whether_it_is_busy(  # type: ignore[no-untyped-def]
        stack_settings, ray_settings, watched, live_server_asgi: LiveServer, operator: User,
        viewer: User, tmp_path: Path) -> None:
    name = f"stacks-{uuid.uuid4().hex[:6]}"
    node_ip = ray_settings.gcs_address.rpartition(":")[0]
    token = tokens.issue(host_name(), None, timezone.now(), node_ip)[1]
    env = agent_env(live_server_asgi.url, token, tmp_path, host_name(), node_ip, gpus=1)
    search = start_search(ray_settings, watched, name, "stacks")
    try:
        with running_agent(env, tmp_path / "agent.log"):
            hung = wait_for(lambda: trial_with(name, "hang"), 90, 0.5, "the hang trial")
            # Opened, then its stack taken by the node's agent: the hanging frame.
            details = stall_where(hung, lambda d: (d.get("stack") or {}).get("state") == "taken",
                                  "the stall's stack")
            stack = details["stack"]
            hung.refresh_from_db()  # first seen before its first result named its pid
            assert stack["source"] == f"py-spy by the agent of {host_name()}", stack
            assert "trainable (" in stack["text"] and "search.py:" in stack["text"], stack["text"]
            assert stack["requested_by"] == "the stall detector"
            # Busy or idle, from the agent's process snapshot: it sleeps.
            details = stall_where(hung, lambda d: d["activity_source"].startswith("the agent"),
                                  "activity read by the agent")
            # Idle is its CPU %, not ps's letter: "S" sleeping, "t" when the snapshot fell while
            # py-spy held it (tracing stop), "R" when it fell as the worker woke for a moment
            # (Ray's own threads; seen on a loaded CI machine). Read by the agent, and alive.
            assert details["busy"] is False and details["process_state"] in ("S", "t", "R"), details
            assert details["cpu_percent"] < BUSY_PERCENT, details
            assert details["activity"].startswith("idle: CPU")
            spin = trial_with(name, "spin")
            details = stall_where(spin, lambda d: d["activity_source"].startswith("the agent")
                                  and d["busy"], "the spinning trial busy per the agent")
            # Its state stays S: ps's letter is the main thread's, and Tune runs a function
            # trainable in another thread. CPU % is what tells.
            assert details["cpu_percent"] >= BUSY_PERCENT
            assert details["activity"].startswith("busy: CPU")
            assert NodeProcess.objects.filter(node=host_name(), pid=hung.pid).exists()

        # The agent stopped: Ray's reporter tells busy from idle ...
        stall_where(spin, lambda d: d["activity_source"].startswith("Ray's reporter")
                    and d["busy"], "the spinning trial busy per Ray's reporter")
        stall_where(hung, lambda d: d["activity_source"].startswith("Ray's reporter")
                    and d["busy"] is False, "the hung trial idle per Ray's reporter")

        # ... and a stack asked for now says why none can be taken.
        assert token_client(viewer).post(f"/api/trials/{hung.pk}/stack").status_code == 403
        reply = token_client(operator).post(f"/api/trials/{hung.pk}/stack")
        assert reply.status_code == 202 and reply.json()["created"] is True, reply.json()
        asked = reply.json()["stack"]["id"]
        details = stall_where(hung, lambda d: d["stack"]["id"] == asked
                              and d["stack"]["state"] == "failed", "the stack asked for")
        reason = details["stack"]["reason"]
        assert details["stack"]["requested_by"] == operator.username
        assert "profiling is off" in reason and "RAY_DASHBOARD_ENABLE_PROFILING=1" in reason
        assert "403" in reason and "stale" in reason, reason  # the agent's silence, too
        assert "raywatch's host" not in reason  # raywatch never takes one itself
        assert TrialStack.objects.filter(trial=hung).count() == 2  # the viewer's made none
    finally:
        stop_node(search)


# --- Ray's /worker/traceback on a head with profiling on -----------------------------------
HUNG_ACTOR = """
import os, sys, time
import ray

ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)


@ray.remote
class Loader:
    def pid(self):
        return os.getpid()

    def wait_for_batches(self):
        while True:
            time.sleep(1)


loader = Loader.remote()
print(ray.get(loader.pid.remote()), ray.util.get_node_ip_address(), flush=True)
loader.wait_for_batches.remote()
time.sleep(600)
"""


@pytest.fixture
def profiling_head(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A Ray head of its own (ports of its own: docs/ray-facts.md) started with
    RAY_DASHBOARD_ENABLE_PROFILING=1 and py-spy on its PATH: (GCS address, dashboard)."""
    bin_dir = Path(sys.executable).parent
    # A temp dir of its own: `ray start --head` writes ray_current_cluster there, not in
    # /tmp/ray, where a later plain ray.init() on this machine would try the dead head.
    temp_dir = Path(tempfile.mkdtemp(prefix="rw-prof-", dir="/tmp"))  # short: socket paths
    ports = ["ray-client-server-port", "metrics-export-port", "dashboard-agent-listen-port",
             "dashboard-agent-grpc-port", "runtime-env-agent-port", "node-manager-port",
             "object-manager-port"]
    flags, (gcs_port, dashboard, autoscaler_metric, dashboard_metric) = port_flags(ports, 4)
    gcs = f"127.0.0.1:{gcs_port}"
    cmd = [str(bin_dir / "ray"), "start", "--head", "--block", f"--port={gcs.split(':')[1]}",
           f"--dashboard-port={dashboard}", "--dashboard-host=127.0.0.1", "--num-cpus=1",
           f"--temp-dir={temp_dir}",
           "--disable-usage-stats", *worker_ports(1), *flags]
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
           "RAY_DASHBOARD_ENABLE_PROFILING": "1", "RAY_AUTH_MODE": "token",
           "PATH": f"{bin_dir}:{os.environ['PATH']}",  # Ray's reporter looks py-spy up there
           "AUTOSCALER_METRIC_PORT": str(autoscaler_metric),
           "DASHBOARD_METRIC_PORT": str(dashboard_metric)}
    with (tmp_path / "head.log").open("wb") as log:
        head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for(lambda: head.poll() is not None or port_open(dashboard), 90, 0.3,
                 "the profiling head's dashboard")
        assert head.poll() is None, (tmp_path / "head.log").read_text()[-3000:]
        yield gcs, f"http://127.0.0.1:{dashboard}"
    finally:
        stop_ray_start(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_ray_gives_the_stack_when_its_head_allows_profiling(  # type: ignore[no-untyped-def]
        settings, profiling_head: tuple[str, str]) -> None:
    gcs, dashboard = profiling_head
    settings.EMBEDDED, settings.RAY_ADDRESS = True, None
    settings.RAY_API_SERVER_ADDRESS = dashboard
    driver = subprocess.Popen([sys.executable, "-c", HUNG_ACTOR, gcs], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True, text=True,
                              env={**os.environ, "RAY_AUTH_MODE": "token"})
    try:
        assert driver.stdout is not None
        pid, node_ip = driver.stdout.readline().split()
        # Ray's view of its actor, as raywatch's Ray poll stores it: what ties the trial
        # to the process (a result line's pid alone is never enough).
        wait_for(lambda: poll_ray_state() or Actor.objects.filter(pid=int(pid)).exists(),
                 30, 0.5, "Ray's poll to list the actor")
        trial = Trial.objects.create(experiment=Experiment.objects.create(name="loader"),
                                     trial_id="l_00000", status=Trial.RUNNING, pid=int(pid),
                                     trainable="Loader", node_ip=node_ip,
                                     hostname="a-node-without-agent")
        stack, created = request_stack(trial, timezone.now())
        assert created
        done = wait_for(lambda: (s := stack_payload(TrialStack.objects.get(pk=stack.pk)))
                        ["state"] != "pending" and s, 60, 0.3, "the stack through Ray")
        assert done["state"] == "taken", done["reason"]
        assert done["source"].startswith("py-spy by Ray's reporter"), done
        assert "Loader.wait_for_batches" in done["text"], done["text"]
        assert "has no raywatch agent" in done["reason"]  # what was tried first
    finally:
        os.killpg(driver.pid, signal.SIGTERM)
        driver.wait(patient(30))
