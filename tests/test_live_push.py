"""Live push over real websockets (uvicorn + Channels + the Redis channel layer):
login and Origin required, current state on connect, updates only after commit."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.db import transaction
from django.test import Client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from collectors.records import NodeRecord, ResourceUse
from dashboard.cluster.state import ingest_nodes
from dashboard.core.push import send_many, trial_group
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.push import push_updates
from dashboard.trials.store import IngestStats
from tests.conftest import PASSWORD, LiveServer

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(user) -> str:  # type: ignore[no-untyped-def]
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client.cookies["sessionid"].value


def open_socket(
    server: LiveServer, cookie: str | None, origin: str | None = None
) -> ClientConnection:
    headers = {"Origin": origin or server.url}
    if cookie:
        headers["Cookie"] = f"sessionid={cookie}"
    return connect(f"ws://127.0.0.1:{server.port}/ws/cluster/", additional_headers=headers,
                   open_timeout=10)


def node(cpu_used: float, node_id: str = "a" * 56, state: str = "ALIVE") -> NodeRecord:
    return NodeRecord(
        node_id=node_id, node_ip="10.0.0.1", hostname="gpu-1", is_head=True, state=state,
        state_message=None, started_at=datetime(2026, 11, 21, tzinfo=UTC), ended_at=None,
        resources={"CPU": ResourceUse(total=8, used=cpu_used), "GPU": ResourceUse(total=4, used=1)},
    )


def receive_topic(ws: ClientConnection, topic: str, timeout: float = 5) -> dict:
    while True:
        message = json.loads(ws.recv(timeout=timeout))
        if message["topic"] == topic:
            return message


def cpu_used(message: dict) -> float:
    return message["data"]["nodes"][0]["resources"]["CPU"]["used"]


def test_anonymous_socket_is_refused(live_server_asgi: LiveServer) -> None:
    with pytest.raises(InvalidStatus) as refused:
        open_socket(live_server_asgi, cookie=None).recv(timeout=5)
    assert refused.value.response.status_code == 403


def test_foreign_origin_is_refused(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidStatus) as refused:
        open_socket(live_server_asgi, session_cookie(viewer), origin="http://evil.example").recv(5)
    assert refused.value.response.status_code == 403


def test_socket_of_user_without_role_is_refused(live_server_asgi: LiveServer, roleless) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidStatus):
        open_socket(live_server_asgi, session_cookie(roleless)).recv(timeout=5)


def test_current_state_on_connect(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    ingest_nodes([node(cpu_used=3)], datetime.now(UTC))
    with open_socket(live_server_asgi, session_cookie(viewer)) as ws:
        health = receive_topic(ws, "health")
        cluster = receive_topic(ws, "cluster")
    assert health["snapshot"] and {s["source"] for s in health["data"]} >= {"ray", "nvml"}
    assert cluster["snapshot"] and cpu_used(cluster) == 3
    assert cluster["data"]["totals"]["gpu"] == {"total": 4.0, "used": 1.0}


def test_update_arrives_only_after_commit(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    ingest_nodes([node(cpu_used=1)], datetime.now(UTC))
    with open_socket(live_server_asgi, session_cookie(viewer)) as ws:
        receive_topic(ws, "cluster")  # the snapshot
        with transaction.atomic():
            ingest_nodes([node(cpu_used=5)], datetime.now(UTC))
            with pytest.raises(TimeoutError):
                receive_topic(ws, "cluster", timeout=1.0)
        assert cpu_used(receive_topic(ws, "cluster")) == 5


def test_rolled_back_update_is_never_pushed(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    ingest_nodes([node(cpu_used=1)], datetime.now(UTC))
    with open_socket(live_server_asgi, session_cookie(viewer)) as ws:
        receive_topic(ws, "cluster")
        try:
            with transaction.atomic():
                ingest_nodes([node(cpu_used=7)], datetime.now(UTC))
                raise RuntimeError("abort")
        except RuntimeError:
            pass
        with pytest.raises(TimeoutError):
            receive_topic(ws, "cluster", timeout=1.5)


def test_unchanged_poll_pushes_nothing(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    ingest_nodes([node(cpu_used=2)], datetime.now(UTC))
    with open_socket(live_server_asgi, session_cookie(viewer)) as ws:
        receive_topic(ws, "cluster")
        ingest_nodes([node(cpu_used=2)], datetime.now(UTC))
        with pytest.raises(TimeoutError):
            receive_topic(ws, "cluster", timeout=1.0)


def test_a_quiet_page_keeps_its_socket(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    """Nothing new for longer than the channel layer waits on Redis at a time (5 s): the
    socket stays open and the next change still arrives (redis-py's 5 s read timeout
    ended the page's consumer there: "Timeout reading from 127.0.0.1:6379")."""
    ingest_nodes([node(cpu_used=1)], datetime.now(UTC))
    with open_socket(live_server_asgi, session_cookie(viewer)) as ws:
        receive_topic(ws, "cluster")
        with pytest.raises(TimeoutError):  # quiet: no message, and no close either
            receive_topic(ws, "cluster", timeout=12)
        ingest_nodes([node(cpu_used=4)], datetime.now(UTC))
        assert cpu_used(receive_topic(ws, "cluster")) == 4


def test_reconnect_reads_state_changed_while_away(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    cookie = session_cookie(viewer)
    ingest_nodes([node(cpu_used=1)], datetime.now(UTC))
    with open_socket(live_server_asgi, cookie) as ws:
        assert cpu_used(receive_topic(ws, "cluster")) == 1
    ingest_nodes([node(cpu_used=6)], datetime.now(UTC))
    with open_socket(live_server_asgi, cookie) as ws:
        assert cpu_used(receive_topic(ws, "cluster")) == 6


def test_static_plotly_served_over_http(live_server_asgi: LiveServer) -> None:
    import urllib.request

    url = f"{live_server_asgi.url}/static/vendor/plotly-basic.min.js"
    with urllib.request.urlopen(url) as reply:
        assert reply.status == 200
        assert b"plotly" in reply.read(4000).lower()


def test_a_thousand_trial_poll_pushes_every_message(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    """A poll that changed 1,500 trials publishes 1,500 trial-page messages and more at
    once; each one goes out (the Redis layer's pool is bounded: sent all at once, most
    failed with "Too many connections"). The experiment page's socket forwards only the
    rows of the trials the page says it shows, and how many others changed."""
    experiment = Experiment.objects.create(name="wide-asha", metric="score", mode="max")
    Trial.objects.bulk_create([Trial(experiment=experiment, trial_id=f"w_{i:05d}",
                                     status="RUNNING", iteration=1) for i in range(1500)])
    pks = sorted(Trial.objects.values_list("pk", flat=True))
    assert send_many([(trial_group(pk), "trial", {"id": pk}) for pk in pks]) == 1500

    headers = {"Origin": live_server_asgi.url, "Cookie": f"sessionid={session_cookie(viewer)}"}
    with connect(f"ws://127.0.0.1:{live_server_asgi.port}/ws/experiments/{experiment.pk}/",
                 additional_headers=headers, open_timeout=10) as ws:
        assert receive_topic(ws, "trials")["snapshot"]  # the page: fetch your rows
        ws.send(json.dumps({"type": "watch", "ids": pks[:2]}))
        ws.send(json.dumps({"type": "ping", "t": 1}))
        receive_topic(ws, "pong")
        Trial.objects.filter(pk__in=pks).update(iteration=2)
        push_updates(IngestStats(changed_trials=set(pks)))
        pushed = receive_topic(ws, "trials", timeout=30)
    assert sorted(row["id"] for row in pushed["data"]) == pks[:2]
    assert {row["iteration"] for row in pushed["data"]} == {2}
    assert pushed["others"] == 1498


def test_the_paged_gpu_wall_gets_the_tiles_of_its_nodes_only(  # type: ignore[no-untyped-def]
        live_server_asgi: LiveServer, viewer) -> None:
    """The GPU wall shows a page of nodes: its socket (?paged=1) sends no snapshot of
    every GPU, forwards the tiles of the nodes the page says it shows, and counts the
    others; the node and GPU pages' socket still gets every tile."""
    from collectors.records import GpuPoll
    from dashboard.gpus.ingest import ingest_gpu_polls
    from tests.test_browser_gpus import reading

    def poll_all() -> None:
        now = datetime.now(UTC)
        ingest_gpu_polls([(GpuPoll(node=f"n{n}", at=now, gpus=(reading(f"n{n}", 0, 50, now),
                                                                 reading(f"n{n}", 1, 60, now))),
                           f"10.2.0.{n}") for n in range(5)], now)

    poll_all()
    headers = {"Origin": live_server_asgi.url, "Cookie": f"sessionid={session_cookie(viewer)}"}
    base = f"ws://127.0.0.1:{live_server_asgi.port}/ws/gpus/"
    with connect(base + "?paged=1", additional_headers=headers, open_timeout=10) as wall, \
            connect(base, additional_headers=headers, open_timeout=10) as every:
        snapshot = receive_topic(wall, "gpus")
        assert snapshot["snapshot"] and snapshot["data"]["gpus"] == []  # fetch your page
        assert len(receive_topic(every, "gpus")["data"]["gpus"]) == 10
        wall.send(json.dumps({"type": "watch", "nodes": ["n1", "n3"]}))
        wall.send(json.dumps({"type": "ping", "t": 1}))
        receive_topic(wall, "pong")
        poll_all()
        pushed = receive_topic(wall, "gpus", timeout=30)
        assert sorted(t["uuid"] for t in pushed["data"]["gpus"]) == [
            "GPU-n1-0", "GPU-n1-1", "GPU-n3-0", "GPU-n3-1"]
        assert pushed["others"] == 6
        assert len(receive_topic(every, "gpus", timeout=30)["data"]["gpus"]) == 10
