"""A session opened without naming a backend (Django's `Client.force_login`, as scripts
and benches log a viewer in) authenticates on the pages and on the live sockets: the
failed-login guard, first among the backends, never owns a session."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from websockets.sync.client import connect

from tests.conftest import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)


def test_force_login_opens_pages_and_sockets(live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(viewer)
    assert client.get("/cluster/").status_code == 200
    headers = {"Origin": live_server_asgi.url,
               "Cookie": f"sessionid={client.cookies['sessionid'].value}"}
    with connect(f"ws://127.0.0.1:{live_server_asgi.port}/ws/cluster/",
                 additional_headers=headers, open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["snapshot"] is True
