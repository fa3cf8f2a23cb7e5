"""A pooled connection left idle still carries the next request: the proxy in front of
raywatch (and a page's own HTTP client) reuses connections it has kept for a minute or
two, and the server must not be the side that closes one under a request."""

from __future__ import annotations

import http.client
import time

import pytest

from tests.conftest import LiveServer

IDLE_S = 7  # past uvicorn's own keep-alive (5 s), which reset such a request


@pytest.mark.django_db(transaction=True)
def test_a_connection_idle_for_seconds_carries_the_next_request(
        live_server_asgi: LiveServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", live_server_asgi.port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        first = conn.getresponse()
        first.read()
        assert first.status == 200
        sock = conn.sock
        time.sleep(IDLE_S)
        conn.request("GET", "/healthz")  # raises RemoteDisconnected if the server closed
        second = conn.getresponse()
        second.read()
        assert second.status == 200
        assert conn.sock is sock, "the request went out on a new connection"
    finally:
        conn.close()
