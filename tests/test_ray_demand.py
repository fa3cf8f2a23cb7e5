"""What Ray cannot place yet, jobs, and object spilling, read from a real local
Ray cluster the way raywatch reads it: over the dashboard's HTTP API."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from collectors.http import SourceError
from collectors.localray import LocalCluster
from collectors.rayaddress import read_token
from collectors.raydemand import parse_demands, parse_jobs, parse_placement_groups
from collectors.raystate import (
    ClusterReply,
    RayEndpoint,
    fetch_cluster,
    fetch_json,
    parse_actors,
    parse_nodes,
)
from collectors.records import DemandRecord, JobRecord, NodeRecord, PlacementGroupRecord
from tests.conftest import port_flags, stop_ray_start, wait_for, worker_ports

pytestmark = pytest.mark.ray

MiB = 1024 * 1024
Connect = Callable[[str], Any]  # joins a cluster by GCS address, gives the ray module


def endpoint_for(dashboard_url: str) -> RayEndpoint:
    return RayEndpoint(dashboard_url, token=read_token(None, "~/.ray/auth_token"))


@pytest.fixture
def endpoint(ray_cluster: LocalCluster) -> RayEndpoint:
    return endpoint_for(ray_cluster.dashboard_url)


@pytest.fixture
def connect(monkeypatch: pytest.MonkeyPatch) -> Iterator[Connect]:
    """Join a cluster as a driver from this process; leave it after the test."""
    import ray

    def join(gcs_address: str) -> Any:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        ray.init(address=gcs_address, log_to_driver=False, configure_logging=False)
        return ray

    yield join
    ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)  # ray.init() exported it for this process


def poll(endpoint: RayEndpoint, predicate: Callable[[ClusterReply], Any], what: str,
         timeout_s: float = 60) -> Any:
    last: list[ClusterReply] = []

    def attempt() -> Any:
        last[:] = [fetch_cluster(endpoint)]
        return predicate(last[0])

    return wait_for(attempt, timeout_s, 0.5, what,
                    explain=lambda: last and parse_demands(last[0]))


def demand(reply: ClusterReply, kind: str, match: Callable[[DemandRecord], bool]
           ) -> DemandRecord | None:
    return next((d for d in parse_demands(reply) if d.kind == kind and match(d)), None)


def group(reply: ClusterReply, pg_id: str) -> PlacementGroupRecord | None:
    return next((g for g in parse_placement_groups(reply) if g.placement_group_id == pg_id), None)


def test_gpu_actor_and_gpu_task_wait_on_a_cluster_without_gpus(
    endpoint: RayEndpoint, connect: Connect, ray_cluster: LocalCluster
) -> None:
    ray = connect(ray_cluster.gcs_address)

    @ray.remote(num_gpus=1)
    class Trainer:
        def ping(self) -> str:
            return "pong"

    @ray.remote(num_gpus=1)
    def render() -> int:
        return 1

    trainer = Trainer.remote()
    task = render.remote()
    actor_id = trainer._actor_id.hex()

    def both(reply: ClusterReply) -> tuple[DemandRecord, DemandRecord] | None:
        actor = demand(reply, "actor", lambda d: d.key == actor_id)
        shape = demand(reply, "task", lambda d: d.bundles[0].get("GPU") == 1.0)
        return (actor, shape) if actor and shape else None

    actor, shape = poll(endpoint, both, "the GPU actor and the GPU task shape as demand")
    assert actor.name.endswith("Trainer") and actor.job_id  # Ray gives the qualified name
    assert actor.bundles == ({"CPU": 1.0, "GPU": 1.0},)  # 1 CPU to place the actor, 1 GPU
    # Ray 2.60 gives no verdict for an actor: its row has no scheduling state.
    assert actor.infeasible is None
    # The report counts the actor's creation and the task under one shape;
    # the actor, listed on its own, is not counted a second time.
    assert shape.key == "CPU:1,GPU:1" and shape.count == 1
    # Ray's cluster status merges infeasible and waiting task shapes: no verdict.
    assert shape.infeasible is None

    ray.cancel(task)
    ray.kill(trainer)

    def gone(reply: ClusterReply) -> bool:
        rows = reply.actors["data"]["result"]["result"]
        return (all(row["actor_id"] != actor_id for row in rows)  # DEAD actors are not pulled
                and not any(d.bundles[0].get("GPU") for d in parse_demands(reply)))

    poll(endpoint, gone, "the killed actor and the cancelled task to leave the demand")


def test_placement_groups_that_wait_and_that_never_fit(
    endpoint: RayEndpoint, connect: Connect, ray_cluster: LocalCluster
) -> None:
    ray = connect(ray_cluster.gcs_address)
    from ray.util.placement_group import placement_group, remove_placement_group

    @ray.remote(num_cpus=1)
    class Holder:
        def ping(self) -> str:
            return "pong"

    holders = [Holder.remote() for _ in range(2)]  # the test cluster's 2 CPUs
    ray.get([h.ping.remote() for h in holders], timeout=60)
    too_large = placement_group([{"CPU": 1000}], name="rw-too-large")
    waits = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK", name="rw-waits")
    big_id, wait_id = too_large.id.hex(), waits.id.hex()
    try:
        def settled(reply: ClusterReply) -> Any:
            pgs = group(reply, big_id), group(reply, wait_id)
            demands = (demand(reply, "placement_group", lambda d: d.key == big_id),
                       demand(reply, "placement_group", lambda d: d.key == wait_id))
            ready = all(g and g.scheduling_state for g in pgs) and all(d and d.strategy
                                                                       for d in demands)
            return (*pgs, *demands) if ready else None

        big, wait, big_demand, wait_demand = poll(endpoint, settled, "both groups to be pending")
        assert big.state == "PENDING" and big.scheduling_state == "INFEASIBLE"
        assert big.bundles == ({"CPU": 1000.0},) and big.name == "rw-too-large"
        assert big_demand.infeasible is True and big_demand.strategy == "PACK"
        # Feasible, but the CPUs are held: Ray says NO_RESOURCES, not INFEASIBLE.
        assert wait.state == "PENDING" and wait.scheduling_state == "NO_RESOURCES"
        assert wait_demand.infeasible is False and wait_demand.strategy == "STRICT_PACK"
        assert wait_demand.bundles == ({"CPU": 1.0}, {"CPU": 1.0})
        assert wait.created_at and wait.creator_job_id == big.creator_job_id

        for holder in holders:
            ray.kill(holder)
        ray.get(waits.ready(), timeout=60)

        def placed(reply: ClusterReply) -> bool:
            created = group(reply, wait_id)
            return bool(created and created.state == "CREATED"
                        and not demand(reply, "placement_group", lambda d: d.key == wait_id)
                        and demand(reply, "placement_group", lambda d: d.key == big_id))

        poll(endpoint, placed, "the waiting group to be placed once the CPUs are free")
    finally:
        remove_placement_group(too_large)
        remove_placement_group(waits)

    def removed(reply: ClusterReply) -> bool:
        rows = reply.placement_groups["data"]["result"]["result"]
        return not {row["placement_group_id"] for row in rows} & {big_id, wait_id}

    poll(endpoint, removed, "removed groups to be left out of the reply")


def test_submitted_job_runs_on_its_driver_then_stops(
    endpoint: RayEndpoint, ray_cluster: LocalCluster
) -> None:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_cluster.dashboard_url, headers=endpoint.headers())
    # This interpreter: a bare `python` on PATH need not have ray installed.
    entrypoint = f'{sys.executable} -c "import ray, time; ray.init(); time.sleep(120)"'

    def submit() -> str | None:
        # Ray answers "No available agent ... try again later" until the head's job
        # agent has registered (seen when another cluster started on the host).
        try:
            return client.submit_job(entrypoint=entrypoint)
        except RuntimeError as exc:
            if "No available agent" in str(exc):
                return None
            raise

    submission_id = wait_for(submit, 60, 2, "Ray's job agent to accept the job")

    def job(status: str, reply: ClusterReply) -> JobRecord | None:
        found = next((j for j in parse_jobs(reply) if j.submission_id == submission_id), None)
        return found if found and found.status == status and found.driver_pid else None

    try:
        running = poll(endpoint, lambda r: job("RUNNING", r), "the job's driver to run", 120)
        assert running.type == "SUBMISSION" and running.key == submission_id
        assert running.job_id and running.driver_pid > 0
        assert running.driver_node_id == ray_cluster.node_id and running.driver_node_ip
        assert running.start_time and running.end_time is None
        reply = fetch_cluster(endpoint)
        # Ray lists the submitted job's driver once, not again as a hand-started driver.
        assert [j for j in parse_jobs(reply) if j.job_id == running.job_id] == [
            j for j in parse_jobs(reply) if j.submission_id == submission_id]
    finally:
        client.stop_job(submission_id)

    stopped = poll(endpoint, lambda r: job("STOPPED", r), "the job to be stopped")
    assert stopped.end_time and stopped.end_time >= stopped.start_time
    assert stopped.driver_pid == running.driver_pid


def test_alive_actor_has_its_start_time(
    endpoint: RayEndpoint, connect: Connect, ray_cluster: LocalCluster
) -> None:
    ray = connect(ray_cluster.gcs_address)

    @ray.remote(num_cpus=0)
    class Worker:
        def ping(self) -> str:
            return "pong"

    worker = Worker.remote()
    ray.get(worker.ping.remote(), timeout=60)
    actor_id = worker._actor_id.hex()
    asked = fetch_cluster(endpoint, start_times_known=())
    record = next(a for a in parse_actors(asked) if a.actor_id == actor_id)
    assert record.state == "ALIVE" and record.start_time
    assert abs((record.start_time - datetime.now(UTC)).total_seconds()) < 120
    # A caller that already holds it, or does not ask, is not sent it (about 5 KB an actor).
    assert actor_id not in fetch_cluster(endpoint, start_times_known={actor_id}).actor_entries
    assert not fetch_cluster(endpoint).actor_entries
    ray.kill(worker)


# --- spilling, on a cluster of its own with an 80 MiB object store ---------------------
@pytest.fixture
def small_store_cluster() -> Iterator[tuple[str, RayEndpoint]]:
    """`ray start --head --block` with every port given (none of them 6379) and its
    own temp dir (where Ray writes the "current cluster" address), so it sits beside
    the session cluster unseen; stopped, alone, after the test."""
    ray_bin = str(Path(sys.executable).parent / "ray")
    temp_dir = Path(tempfile.mkdtemp(prefix="rw-spill-", dir="/tmp"))  # short: socket paths
    ports = ["ray-client-server-port", "metrics-export-port", "dashboard-agent-listen-port",
             "dashboard-agent-grpc-port", "runtime-env-agent-port", "node-manager-port",
             "object-manager-port"]
    flags, (gcs_port, dashboard_port, autoscaler_metric, dashboard_metric) = port_flags(ports, 4)
    cmd = [ray_bin, "start", "--head", "--block", "--num-cpus=1", "--disable-usage-stats",
           f"--object-store-memory={80 * MiB}", f"--port={gcs_port}", f"--temp-dir={temp_dir}",
           "--include-dashboard=true", "--dashboard-host=127.0.0.1",
           f"--dashboard-port={dashboard_port}",
           *worker_ports(0), *flags]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", AUTOSCALER_METRIC_PORT=str(autoscaler_metric),
               DASHBOARD_METRIC_PORT=str(dashboard_metric),
               # The dashboard reads raylet stats (storeStats) every 15 s by default.
               NODE_STATS_UPDATE_INTERVAL_SECONDS="2")
    log = temp_dir / "ray-start.log"
    with log.open("wb") as out:
        process = subprocess.Popen(cmd, start_new_session=True, stdout=out,
                                   stderr=subprocess.STDOUT, env=env)
    try:
        endpoint = endpoint_for(f"http://127.0.0.1:{dashboard_port}")

        def store_stats() -> bool:
            assert process.poll() is None, log.read_text()[-2000:]
            try:
                rows = fetch_json(endpoint, "/nodes?view=summary")["data"]["summary"]
            except SourceError:
                return False
            return any(row.get("raylet", {}).get("storeStats") for row in rows)

        wait_for(store_stats, 90, 0.5, "the small-store cluster's dashboard")
        import ray

        yield f"{ray.util.get_node_ip_address()}:{gcs_port}", endpoint
    finally:
        stop_ray_start(process, 60)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_spilled_and_restored_bytes_per_node(
    small_store_cluster: tuple[str, RayEndpoint], connect: Connect
) -> None:
    gcs_address, endpoint = small_store_cluster
    ray = connect(gcs_address)
    import numpy as np

    head = parse_nodes(fetch_cluster(endpoint))[0]
    assert head.object_store_total_bytes == 80 * MiB
    assert head.object_store_spilled_bytes == 0 and head.object_store_restored_bytes == 0

    refs = [ray.put(np.full(30 * MiB, i, dtype=np.uint8)) for i in range(6)]  # 180 MiB, kept

    def node(reply: ClusterReply) -> NodeRecord:
        return parse_nodes(reply)[0]

    spilled = poll(endpoint, lambda r: node(r).object_store_spilled_bytes, "spilled bytes")
    assert spilled >= 30 * MiB  # at least one whole object went to disk

    assert ray.get(refs[0])[0] == 0  # read back from disk
    restored = poll(endpoint, lambda r: node(r).object_store_restored_bytes, "restored bytes")
    assert restored >= 30 * MiB
    del refs
