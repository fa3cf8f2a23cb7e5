"""Every live-update socket, not only the cluster page's, is refused to a visitor who
is not logged in, to a page on another site (cross-site websocket hijacking rides on
the user's cookie), to a client that sends no Origin, and to a user without a role;
a viewer on raywatch's own pages gets through."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from dashboard.routing import websocket_urlpatterns
from tests.conftest import PASSWORD, LiveServer

pytestmark = pytest.mark.django_db(transaction=True)


def socket_paths() -> list[str]:
    return ["/ws/" + str(p.pattern).removeprefix("ws/").replace("<int:pk>", "1")
            for p in websocket_urlpatterns]


def cookie_of(user) -> str:  # type: ignore[no-untyped-def]
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client.cookies["sessionid"].value


def status_of(server: LiveServer, path: str, cookie: str | None, origin: str | None) -> int:
    """101 when the socket opened and sent its first message, else the HTTP refusal."""
    headers = {"Origin": origin} if origin else {}
    if cookie:
        headers["Cookie"] = f"sessionid={cookie}"
    try:
        with connect(f"ws://127.0.0.1:{server.port}{path}", additional_headers=headers,
                     open_timeout=10) as ws:
            json.loads(ws.recv(timeout=5))
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code


def statuses(server: LiveServer, cookie: str | None, origin: str | None) -> dict[str, int]:
    return {path: status_of(server, path, cookie, origin) for path in socket_paths()}


def test_there_are_sockets_to_check() -> None:
    assert "/ws/cluster/" in socket_paths() and len(socket_paths()) == len(websocket_urlpatterns)


def test_anonymous_is_refused_on_every_socket(live_server_asgi: LiveServer) -> None:
    got = statuses(live_server_asgi, None, live_server_asgi.url)
    assert got == dict.fromkeys(socket_paths(), 403)


def test_foreign_origin_is_refused_on_every_socket(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    got = statuses(live_server_asgi, cookie_of(viewer), "https://evil.example")
    assert got == dict.fromkeys(socket_paths(), 403)


def test_missing_origin_is_refused(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    got = statuses(live_server_asgi, cookie_of(viewer), None)
    assert got == dict.fromkeys(socket_paths(), 403)


def test_user_without_role_is_refused_on_every_socket(live_server_asgi: LiveServer,
                                                      roleless) -> None:  # type: ignore[no-untyped-def]
    got = statuses(live_server_asgi, cookie_of(roleless), live_server_asgi.url)
    assert got == dict.fromkeys(socket_paths(), 403)


def test_viewer_on_our_own_pages_gets_through(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    got = statuses(live_server_asgi, cookie_of(viewer), live_server_asgi.url)
    assert got == dict.fromkeys(socket_paths(), 101)
