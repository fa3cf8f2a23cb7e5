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

    with urllib.request.urlopen(f"{live_server_asgi.url}/static/vendor/plotly.min.js") as reply:
        assert reply.status == 200
        assert b"plotly" in reply.read(4000).lower()
