"""The Ray source on a real local cluster: nodes, resources in use, joins and deaths."""

from __future__ import annotations

import pytest
from django.test import Client

from dashboard.cluster.models import Node
from dashboard.cluster.tasks import poll_ray_state
from dashboard.core.models import SourceHealth
from tests.conftest import api_token, search_said, stop_ray_start, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.django_db(transaction=True)]


def poll_until(predicate, what: str, timeout_s: float = 60, explain=None):  # type: ignore[no-untyped-def]
    def attempt():  # type: ignore[no-untyped-def]
        poll_ray_state()
        return predicate()

    return wait_for(attempt, timeout_s, 0.5, what, explain)


def test_head_node_with_its_resources(ray_settings) -> None:  # type: ignore[no-untyped-def]
    poll_until(lambda: Node.objects.filter(is_head=True, state="ALIVE").exists(), "the head node")
    head = Node.objects.get(is_head=True)
    assert head.node_id == ray_settings.node_id
    assert head.resources["CPU"]["total"] == 2.0
    assert head.mem_total_bytes and head.mem_total_bytes > 0
    assert head.object_store_total_bytes and head.object_store_total_bytes > 0
    assert SourceHealth.objects.get(source="ray").state in ("healthy", "degraded")


def test_cpu_in_use_follows_the_cluster_load(ray_settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # ray.init() sets it for the process
    ray.init(address=ray_settings.gcs_address, log_to_driver=False, configure_logging=False)
    try:
        @ray.remote(num_cpus=1)
        class Holder:
            def ping(self) -> str:
                return "pong"

        holder = Holder.remote()
        assert ray.get(holder.ping.remote(), timeout=60) == "pong"
        poll_until(lambda: Node.objects.get(is_head=True).resources["CPU"]["used"] == 1.0,
                   "CPU in use to reach 1")
        ray.kill(holder)
        poll_until(lambda: Node.objects.get(is_head=True).resources["CPU"]["used"] == 0.0,
                   "CPU in use to fall back to 0")
    finally:
        ray.shutdown()


def test_worker_node_joins_and_dies(ray_settings, add_worker_node, viewer) -> None:  # type: ignore[no-untyped-def]
    worker = add_worker_node(num_cpus=1)
    # A loaded machine starts a node's raylet, dashboard agent and runtime-env agent
    # slowly: a CI run once took over 60 s.
    joined = poll_until(
        lambda: Node.objects.filter(is_head=False, state="ALIVE").first(), "the worker to join",
        120, explain=lambda: search_said(worker))
    api = Client(HTTP_AUTHORIZATION=f"Token {api_token(viewer)}")
    listed = api.get("/api/nodes/").json()
    assert {n["is_head"] for n in listed if n["state"] == "ALIVE"} == {True, False}
    totals = api.get("/api/cluster/").json()["totals"]
    assert totals["nodes_alive"] == 2 and totals["cpu"]["total"] == 3.0

    stop_ray_start(worker)
    poll_until(lambda: Node.objects.get(node_id=joined.node_id).state == "DEAD",
               "the worker node to be marked dead")
    gone = next(n for n in api.get("/api/nodes/").json() if n["node_id"] == joined.node_id)
    assert gone["ended_at"] and "SIGTERM" in gone["state_message"]
    totals = api.get("/api/cluster/").json()["totals"]
    assert totals["nodes_alive"] == 1 and totals["cpu"]["total"] == 2.0
