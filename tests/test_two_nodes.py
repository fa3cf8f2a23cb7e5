"""Two Ray nodes, two node agents, and a raywatch that reads no trial directory.

A real two-node Ray cluster on this host: the suite's head and node B (`ray start` with
a host name of its own in a UTS namespace, address 127.0.0.2, a HOME of its own, and a
`node_b` resource). The Tune driver runs as a Ray job placed on node B (entrypoint
resources), its trials run on B, and Tune writes on B only: the live copy under the
driver_artifacts of B's Ray temp dir and the storage copy under B's ~/ray_results. Each node has
an agent (`python -m collectors.agent`) that sees only its own node's directories;
raywatch (`manage.py serve`, RAYWATCH_CENTRAL_LOGS=0) reads none.

In the API and in Chromium: the trials and their steps arrive live; a hung trial on B is
detected, its incident says idle and shows its Python stack (taken by B's agent); the
Cluster page says node B's agent is connected, then stale while it is stopped, and
nothing it read meanwhile is lost once it is back; terminate goes through B's agent.
Once on the embedded default and once on the production topology (Postgres, Redis,
Celery worker and beat)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect

from collectors.localray import LocalCluster, free_port
from tests.agents import agent_env, running_agent, stop_agent
from tests.conftest import port_flags, stop_ray_start, wait_for, worker_ports
from tests.patience import ms, patient
from tests.served import (
    QUICK,
    ROOT,
    Raywatch,
    api_get,
    api_post,
    embedded_env,
    first_run,
    manage,
    scratch_database,
    start_serve,
    stop_serve,
)
from tests.test_end_to_end import login, screenshots

pytestmark = [pytest.mark.beside, pytest.mark.ray, pytest.mark.browser, pytest.mark.timeout(600)]
NODE_B, NODE_B_IP = "node-b", "127.0.0.2"
# Where to save screenshots (1280 and 1440 px) when a person wants to look at them.
SHOTS = os.environ.get("RAYWATCH_TWO_NODE_SHOTS")
QUICK_AGENTS = {**QUICK, "RAYWATCH_AGENT_STALE_S": "6"}  # node B's agent silent: in seconds


@dataclass(frozen=True)
class NodeB:
    node_id: str  # Ray's id of node B (dead nodes of earlier tests may share its address)
    home: Path  # its HOME: Tune's default storage, ~/ray_results, lives here
    ray_tmp: Path  # its Ray temp dir (--temp-dir): the live driver_artifacts are here
    process: subprocess.Popen[bytes]


@pytest.fixture(scope="module")
def node_b(ray_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[NodeB]:
    """A second raylet joined to the suite's head: another host to Ray and raywatch.

    A start that exits or does not join in time is tried once more on fresh ports and a
    fresh temp dir; a failure says what `ray start` and the raylet printed."""
    home = tmp_path_factory.mktemp("node-b-home")
    tries: list[str] = []
    for attempt in range(2):
        ray_tmp = Path(tempfile.mkdtemp(prefix="rwb-"))  # short: Ray's socket paths live here
        log = home.parent / f"node-b-start-{attempt}.log"
        process = _start_node_b(ray_cluster, home, ray_tmp, log, attempt)
        node_id = _wait_for_node_b(ray_cluster, process)
        if node_id:
            break
        tries.append(_why_node_b_failed(process, log, ray_tmp))
        _stop_node_b(process, ray_tmp)
    else:
        raise AssertionError("node B did not join the cluster:\n" + "\n---\n".join(tries))
    try:
        yield NodeB(node_id, home, ray_tmp, process)
    finally:
        _stop_node_b(process, ray_tmp)


def _start_node_b(cluster: LocalCluster, home: Path, ray_tmp: Path, log: Path,
                  attempt: int) -> subprocess.Popen[bytes]:
    ports = ["dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
             "runtime-env-agent-port", "node-manager-port", "object-manager-port"]
    ray = [str(Path(sys.executable).parent / "ray"), "start", "--address",
           cluster.gcs_address, "--block", "--num-cpus=2", "--disable-usage-stats",
           f"--node-ip-address={NODE_B_IP}", '--resources={"node_b": 1}',
           f"--temp-dir={ray_tmp}", f"--object-store-memory={200 * 1024 * 1024}",
           *worker_ports(2 + attempt), *port_flags(ports)[0]]
    cmd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', NODE_B, *ray]
    with log.open("wb") as sink:
        return subprocess.Popen(
            cmd, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "token",
                 "RAY_AUTH_TOKEN": ray_token()})


def _wait_for_node_b(cluster: LocalCluster, process: subprocess.Popen[bytes]) -> str | None:
    """Node B's id once Ray lists it ALIVE; None if `ray start` exits or 60 s pass."""
    deadline = time.monotonic() + patient(60)
    while time.monotonic() < deadline and process.poll() is None:
        node_id = _alive_node_at(cluster, NODE_B_IP)
        if node_id:
            return node_id
        time.sleep(1)
    return None


def _why_node_b_failed(process: subprocess.Popen[bytes], log: Path, ray_tmp: Path) -> str:
    state = (f"`ray start` exited {process.returncode}" if process.poll() is not None
             else "`ray start` still running, node not ALIVE after 60 s")
    parts = [state, f"ray start said:\n{log.read_text(errors='replace')[-3000:]}"]
    for name in ("raylet.out", "raylet.err", "dashboard_agent.log"):
        for path in sorted(ray_tmp.glob(f"session_*/logs/{name}"))[-1:]:
            parts.append(f"{name}:\n{path.read_text(errors='replace')[-2000:]}")
    return "\n".join(parts)


def _stop_node_b(process: subprocess.Popen[bytes], ray_tmp: Path) -> None:
    stop_ray_start(process)
    shutil.rmtree(ray_tmp, ignore_errors=True)


def ray_token() -> str:
    return (Path.home() / ".ray" / "auth_token").read_text().strip()


def _alive_node_at(cluster: LocalCluster, address: str) -> str | None:
    import urllib.request

    request = urllib.request.Request(f"{cluster.dashboard_url}/api/v0/nodes",
                                     headers={"Authorization": f"Bearer {ray_token()}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        nodes = json.loads(reply.read())["data"]["result"]["result"]
    return next((n["node_id"] for n in nodes
                 if n["state"] == "ALIVE" and n["node_ip"] == address), None)


@pytest.fixture
def search_on_b(ray_cluster: LocalCluster, node_b: NodeB) -> Iterator[tuple[str, str]]:
    """The Tune driver as a Ray job placed on node B: one trial that hangs, one healthy."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_cluster.dashboard_url,
                                 headers={"Authorization": f"Bearer {ray_token()}"})
    name = f"twonode-{uuid.uuid4().hex[:6]}"
    entrypoint = (f"cd {ROOT} && {sys.executable} -m tests.tune_scripts.search "
                  f"{ray_cluster.gcs_address} - {name} node_b")
    job = client.submit_job(entrypoint=entrypoint, entrypoint_resources={"node_b": 0.01})
    try:
        yield name, job
    finally:
        client.stop_job(job)  # Ray ends the driver and its trials; no need to wait here


@pytest.fixture(params=["embedded", "production"])
def raywatch(request, ray_cluster: LocalCluster, tmp_path: Path) -> Iterator[Raywatch]:  # type: ignore[no-untyped-def]
    env = {**embedded_env(tmp_path / "data"), **QUICK_AGENTS,
           "RAY_ADDRESS": ray_cluster.gcs_address,
           "RAYWATCH_CENTRAL_LOGS": "0", "RAYWATCH_GPU_SOURCE": "off"}
    with scratch_database(os.environ["DATABASE_URL"]) as database_url:
        if request.param == "production":
            env.update(DATABASE_URL=database_url, REDIS_URL=os.environ["REDIS_URL"],
                       RAYWATCH_CHANNEL_PREFIX=f"two-{uuid.uuid4().hex[:6]}")
        token, password = first_run(env)
        port, log = free_port(), tmp_path / "serve.log"
        server = start_serve(env, port, log)
        try:
            yield Raywatch(f"http://127.0.0.1:{port}", token, password, env)
        finally:
            output = stop_serve(server, log)
        assert "Traceback" not in output, output[-8000:]


def node_agent(rw: Raywatch, tmp_path: Path, node: str, node_ip: str, home: Path,
               ray_tmp: Path) -> dict[str, str]:
    """`make agent`'s environment on one node: raywatch's URL, the node's token, and the
    node's own directories only."""
    token = manage(rw.env, "agent_token", node, "--ip", node_ip).strip()
    return agent_env(rw.url, token, tmp_path, node, node_ip, gpus=1, HOME=str(home),
                     RAYWATCH_RAY_TMP_DIR=str(ray_tmp), RAYWATCH_NODE_NAME=node,
                     RAYWATCH_POLL_LOGS_S="0.5")


def trials_by_behaviour(rw: Raywatch, name: str) -> dict[str, dict] | None:
    trials = rw.api(f"/api/trials/?experiment={name}")
    if len(trials) < 2 or not all(t["pid"] for t in trials):
        return None
    return {t["config"]["behaviour"]: t for t in trials}


def stall_of(rw: Raywatch, trial_id: str) -> dict | None:
    found = [i for i in rw.api("/api/alerts/?kind=trial_stalled&state=firing")
             if i["trial_id"] == trial_id]
    return found[0] if found else None


def coverage_of(rw: Raywatch, node_id: str) -> str | None:
    reply = api_get(f"{rw.url}/api/agents/coverage/", rw.token)
    for row in reply["nodes"]:  # type: ignore[index]
        if row.get("node_id") == node_id:
            return str(row["state"])
    return None


def written_iterations(home: Path, name: str, trial_id: str) -> set[int]:
    """The iterations of the lines a trial has written to its result.json on B so far (a
    line still being written is not one yet)."""
    files = list((home / "ray_results" / name).glob(f"*{trial_id}*/result.json"))
    iterations = set()
    for line in files[0].read_text().splitlines() if files else []:
        try:
            iterations.add(int(json.loads(line)["training_iteration"]))
        except (ValueError, KeyError, TypeError):
            continue
    return iterations


def test_a_hang_on_node_b_is_seen_explained_and_ended_through_its_agent(  # type: ignore[no-untyped-def]
        raywatch: Raywatch, search_on_b, node_b: NodeB, ray_cluster: LocalCluster, page,
        tmp_path: Path) -> None:
    rw, (name, _job) = raywatch, search_on_b
    head_home, head_tmp = tmp_path / "head-home", tmp_path / "head-ray-tmp"
    head_home.mkdir()
    head_tmp.mkdir()
    head_ip = ray_cluster.gcs_address.rpartition(":")[0]
    env_a = node_agent(rw, tmp_path, "node-head", head_ip, head_home, head_tmp)
    env_b = node_agent(rw, tmp_path, NODE_B, NODE_B_IP, node_b.home, node_b.ray_tmp)

    with running_agent(env_a, tmp_path / "agent-a.log"), \
            running_agent(env_b, tmp_path / "agent-b.log") as agent_b:
        # The trials and their steps, read on node B by its agent only.
        trials = wait_for(lambda: trials_by_behaviour(rw, name), 180, 1,
                          "the search's trials from node B's agent",
                          explain=lambda: (tmp_path / "agent-b.log").read_text()[-2000:])
        hung, healthy = trials["hang"], trials["healthy"]
        assert hung["node_ip"] == NODE_B_IP and healthy["node_ip"] == NODE_B_IP
        assert hung["hostname"] == NODE_B
        steps = len(rw.api(f"/api/trials/{healthy['id']}/results/"))
        wait_for(lambda: len(rw.api(f"/api/trials/{healthy['id']}/results/")) > steps + 2,
                 30, 0.5, "the healthy trial's steps to keep arriving")

        # The hang: detected, idle per B's agent, its stack taken by B's agent.
        incident = wait_for(lambda: (i := stall_of(rw, hung["trial_id"]))
                            and (i["details"].get("stack") or {}).get("state") == "taken" and i,
                            90, 1, "the stall with its stack",
                            explain=lambda: stall_of(rw, hung["trial_id"]))
        details = incident["details"]
        assert details["busy"] is False, details
        assert NODE_B in details["activity_source"], details
        assert details["stack"]["source"] == f"py-spy by the agent of {NODE_B}", details["stack"]
        assert "trainable (" in details["stack"]["text"], details["stack"]["text"]

        login(page, rw, f"/incidents/{incident['id']}/")
        expect(page.locator("#incident-stack")).to_contain_text("trainable (", timeout=ms(20))
        shoot(page, "incident")
        page.goto(f"{rw.url}/trials/{hung['id']}/")
        shoot(page, "trial")
        page.goto(f"{rw.url}/cluster/")
        b_row = page.locator(f'#nodes tbody tr[data-node-id="{node_b.node_id}"]')
        expect(b_row.locator("td.agent")).to_have_attribute("data-coverage", "connected",
                                                            timeout=ms(20))
        shoot(page, "cluster-connected")

        # B's agent stops: the Cluster page says so; what B wrote meanwhile is not lost.
        stop_agent(agent_b)
        expect(b_row.locator("td.agent")).to_have_attribute("data-coverage", "stale",
                                                            timeout=ms(30))
        assert coverage_of(rw, node_b.node_id) == "stale"
        shoot(page, "cluster-stale")
        with running_agent(env_b, tmp_path / "agent-b.log"):
            expect(b_row.locator("td.agent")).to_have_attribute("data-coverage", "connected",
                                                                timeout=ms(30))
            # Every line the healthy trial had written on B by now is stored, once. (Not
            # "as many as the file holds" at each look: the trial goes on writing, a line
            # every 0.3 s, faster than a line travels.)
            written = written_iterations(node_b.home, name, healthy["trial_id"])
            assert written, "the healthy trial wrote nothing on node B"
            seen: dict[str, object] = {}

            def caught_up() -> bool:
                stored = rw.api(f"/api/trials/{healthy['id']}/results/?page_size=1000")
                keys = [(r["attempt"], r["iteration"]) for r in stored]
                missing = sorted(written - {i for _, i in keys})
                doubled = sorted({k for k in keys if keys.count(k) > 1})
                seen.update(written=len(written), stored=len(keys), missing=missing[:20],
                            doubled=doubled[:20])
                assert not doubled, f"results stored twice: {seen}"
                return not missing

            wait_for(caught_up, 60, 1, "raywatch to have every line written on node B",
                     explain=lambda: f"{seen}; agent B: "
                                     f"{(tmp_path / 'agent-b.log').read_text()[-1500:]}")

            # Terminate the hung trial: it goes through B's agent and ends the process.
            action = api_post(f"{rw.url}/api/trials/{hung['id']}/terminate", rw.token,
                               {"reason": "hung on node B"})
            done = wait_for(lambda: (a := rw.api(f"/api/actions/{action['action_id']}/"))
                            and a["state"] in ("succeeded", "failed") and a, 90, 1,
                            "the terminate's outcome")
    assert done["state"] == "succeeded", done
    steps_done = [s["step"] for s in done["steps"]]
    assert "agent_command" in steps_done and "gone" in steps_done, done["steps"]
    agent_step = next(s for s in done["steps"] if s["step"] == "agent_result")
    assert f"agent of {NODE_B}" in agent_step["detail"], done["steps"]



def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    if SHOTS:
        screenshots(page, f"{SHOTS}/two-node-{name}")
