"""The GPU wall a page of nodes at a time (GET /api/gpus/wall/): every node on exactly
one page, in name order and never split; the filter and state chips narrow it on the
server; the state counts are the whole wall's; bad parameters are named."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from collectors.records import GpuPoll
from dashboard.gpus.ingest import ingest_gpu_polls
from tests.test_browser_gpus import reading

NODES, PER_NODE = 41, 2


@pytest.fixture
def fleet(db: None) -> None:
    """41 nodes of 2 GPUs; node-07's GPUs free (0%), the others busy; node-40 stale."""
    now = timezone.now()
    polls = []
    for n in range(NODES):
        node = f"node-{n:02d}"
        at = now - timedelta(minutes=10) if n == 40 else now
        util = 0 if n == 7 else 50
        polls.append((GpuPoll(node=node, at=at, gpus=tuple(
            reading(node, i, util, at) for i in range(PER_NODE))), f"10.1.0.{n}"))
    ingest_gpu_polls(polls, now)


def wall(client: Client, query: str = "") -> dict:
    reply = client.get("/api/gpus/wall/" + query)
    assert reply.status_code == 200, reply.content
    return reply.json()


def test_every_node_is_on_exactly_one_page_whole_and_in_order(fleet: None,
                                                              admin_client: Client) -> None:
    seen: list[str] = []
    first = wall(admin_client, "?per_page=16")
    assert first["pages"] == 3 and first["nodes"] == {"matched": NODES, "total": NODES}
    for page in range(1, 4):
        data = wall(admin_client, f"?per_page=16&page={page}")
        assert data["page"] == page
        nodes = [t["node"] for t in data["tiles"]]
        assert sorted(set(nodes)) == data["page_nodes"]
        assert all(nodes.count(n) == PER_NODE for n in data["page_nodes"])  # never split
        seen += data["page_nodes"]
    assert seen == [f"node-{n:02d}" for n in range(NODES)]
    assert wall(admin_client, "?per_page=16&page=99")["page"] == 3  # past the last: the last
    assert first["states"] == {"busy": 78, "free": 2, "stale": 2}
    assert first["gpus"] == {"matched": 82, "total": 82}


def test_the_filter_and_states_narrow_on_the_server(fleet: None, admin_client: Client) -> None:
    by_ip = wall(admin_client, "?q=10.1.0.12")
    assert by_ip["page_nodes"] == ["node-12"] and len(by_ip["tiles"]) == PER_NODE
    assert by_ip["gpus"] == {"matched": 2, "total": 82}
    assert by_ip["states"]["busy"] == 78  # the counts stay the whole wall's
    two = wall(admin_client, "?state=free,stale")
    assert two["page_nodes"] == ["node-07", "node-40"]
    assert {t["state"] for t in two["tiles"]} == {"free", "stale"}
    one_gpu = wall(admin_client, "?q=GPU-node-03-1")
    assert [t["uuid"] for t in one_gpu["tiles"]] == ["GPU-node-03-1"]
    assert wall(admin_client, "?q=nothing-like-this")["tiles"] == []


@pytest.mark.parametrize(("query", "bad"), [
    ("?page=0", "page"), ("?page=x", "page"), ("?per_page=201", "per_page"),
    ("?state=busy,melting", "state"), ("?q=" + "x" * 201, "q"),
])
def test_a_bad_parameter_is_named(fleet: None, admin_client: Client, query: str,
                                  bad: str) -> None:
    reply = admin_client.get("/api/gpus/wall/" + query)
    assert reply.status_code == 400
    assert list(reply.json()) == [bad]


def test_the_wall_page_draws_the_page_it_is_asked_for(fleet: None,
                                                     admin_client: Client) -> None:
    html = admin_client.get("/gpus/?q=node-33").content.decode()
    assert "GPU-node-33-0" in html and "GPU-node-01-0" not in html
    assert admin_client.get("/gpus/?page=nonsense").status_code == 200  # the JS names it


def test_a_node_polled_again_is_drawn_anew_at_once(fleet: None, admin_client: Client) -> None:
    """Each node's tiles are kept between requests; a new poll of one node is seen by the
    very next request, the other nodes' tiles as they were."""
    assert wall(admin_client)["states"]["free"] == 2
    now = timezone.now()
    ingest_gpu_polls([(GpuPoll(node="node-07", at=now, gpus=tuple(
        reading("node-07", i, 80, now, pids=(4242,)) for i in range(PER_NODE))),
        "10.1.0.7")], now)
    data = wall(admin_client, "?q=node-07")
    assert data["states"] == {"busy": 80, "stale": 2}
    assert [t["utilization"] for t in data["tiles"]] == [80, 80]
    assert {p["pid"] for t in data["tiles"] for p in t["processes"]} == {4242}
