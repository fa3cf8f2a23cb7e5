"""A live-update socket stays open only while its user may see the pages: a user whose
role is taken away, who logs out, or who is deactivated stops getting updates (the
socket closes with 4403, which the page shows as "not allowed: log in again"), at
once when raywatch hears of it, else within RAYWATCH_SOCKET_RECHECK_S. Other users'
sockets stay open."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.conftest import PASSWORD, LiveServer, make_user

pytestmark = pytest.mark.django_db(transaction=True)
CLOSED_FOR_ROLE = 4403


def logged_in(user: User) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


@contextmanager
def socket(server: LiveServer, client: Client) -> Iterator[ClientConnection]:
    headers = {"Origin": server.url, "Cookie": f"sessionid={client.cookies['sessionid'].value}"}
    with connect(f"ws://127.0.0.1:{server.port}/ws/cluster/", additional_headers=headers,
                 open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["snapshot"] is True
        yield ws


def closed_with(ws: ClientConnection, within_s: float) -> int | None:
    """The close code once the server closes the socket, None if it is still open."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            ws.recv(timeout=max(0.05, deadline - time.monotonic()))
        except TimeoutError:
            return None
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    return None


def still_open(ws: ClientConnection) -> bool:
    ws.send(json.dumps({"type": "ping", "t": 1}))
    try:
        while True:
            if json.loads(ws.recv(timeout=5)).get("topic") == "pong":
                return True
    except (ConnectionClosed, TimeoutError):
        return False


def test_a_viewer_whose_role_is_taken_away_is_dropped_at_once(live_server_asgi: LiveServer,  # type: ignore[no-untyped-def]
                                                              viewer) -> None:
    other = make_user("val-viewer", "viewer")
    with socket(live_server_asgi, logged_in(viewer)) as ws, \
            socket(live_server_asgi, logged_in(other)) as others:
        viewer.groups.clear()
        assert closed_with(ws, 10) == CLOSED_FOR_ROLE
        assert still_open(others)


def test_removing_a_user_from_the_role_group_drops_them(live_server_asgi: LiveServer,  # type: ignore[no-untyped-def]
                                                        viewer) -> None:
    with socket(live_server_asgi, logged_in(viewer)) as ws:
        Group.objects.get(name="viewer").user_set.remove(viewer)
        assert closed_with(ws, 10) == CLOSED_FOR_ROLE


def test_logging_out_drops_the_sessions_socket(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    client, elsewhere = logged_in(viewer), logged_in(viewer)
    with socket(live_server_asgi, client) as ws, \
            socket(live_server_asgi, elsewhere) as other_session:
        assert client.post("/logout/").status_code == 302
        assert closed_with(ws, 10) == CLOSED_FOR_ROLE
        assert still_open(other_session)  # the same user, logged in elsewhere


def test_a_change_nobody_announced_is_found_by_the_periodic_check(  # type: ignore[no-untyped-def]
        live_server_asgi: LiveServer, viewer, settings) -> None:
    settings.SOCKET_RECHECK_S = 0.5
    with socket(live_server_asgi, logged_in(viewer)) as ws:
        User.objects.filter(pk=viewer.pk).update(is_active=False)  # no signal: a bare UPDATE
        assert closed_with(ws, 10) == CLOSED_FOR_ROLE
