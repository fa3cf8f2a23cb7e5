"""A Redis restart drops every socket and forgets every group membership; an open
page reconnects by itself and shows the state committed meanwhile, without a reload."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from datetime import UTC, datetime

import pytest
from channels.layers import channel_layers
from playwright.sync_api import expect

from collectors.localray import free_port
from dashboard.cluster.state import ingest_nodes
from dashboard.settings import redis_layer_host
from tests.conftest import LiveServer, login, wait_for
from tests.patience import ms, patient
from tests.test_live_push import node

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def start_redis(port: int) -> subprocess.Popen:
    binary = shutil.which("redis-server")
    assert binary, "redis-server is needed for this test"
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    wait_for(lambda: _answers(port), 10, 0.1, "redis to start")
    return process


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture
def private_redis(settings):  # type: ignore[no-untyped-def]
    """A Redis of this test's own, so it can be killed and restarted."""
    port = free_port()
    state = {"process": start_redis(port), "port": port}
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [redis_layer_host(f"redis://127.0.0.1:{port}/0")]},
    }}
    channel_layers.backends.clear()
    yield state
    state["process"].terminate()
    state["process"].wait(patient(10))
    channel_layers.backends.clear()


def test_page_recovers_after_redis_restart(page, private_redis, viewer) -> None:  # type: ignore[no-untyped-def]
    ingest_nodes([node(cpu_used=1)], datetime.now(UTC))
    server = LiveServer().start()
    try:
        login(page, server, viewer)
        cpu = page.locator('[data-total="cpu"]')
        expect(cpu).to_have_text("1 / 8")
        expect(page.locator("#live-state")).to_have_text("live")
        page.evaluate("window.__noReload = true")

        private_redis["process"].kill()
        private_redis["process"].wait(patient(10))
        expect(page.locator("#live-state")).to_contain_text("reconnecting", timeout=ms(15))
        ingest_nodes([node(cpu_used=4)], datetime.now(UTC))  # its push has nowhere to go
        time.sleep(1)
        private_redis["process"] = start_redis(private_redis["port"])

        expect(page.locator("#live-state")).to_have_text("live", timeout=ms(30))
        expect(cpu).to_have_text("4 / 8")
        ingest_nodes([node(cpu_used=6)], datetime.now(UTC))  # pushes flow again
        expect(cpu).to_have_text("6 / 8", timeout=ms(10))
        assert page.evaluate("window.__noReload") is True
    finally:
        server.stop()
