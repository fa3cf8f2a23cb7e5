"""In Chromium: log in, open the cluster page, and watch it follow the real cluster
(a node joins, a node dies, the server restarts) without a reload."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from dashboard.celery import app as celery_app
from dashboard.core.scheduler import EmbeddedScheduler
from tests.conftest import LiveServer, login, stop_ray_start
from tests.patience import ms

pytestmark = [pytest.mark.browser, pytest.mark.ray]


@pytest.fixture
def collectors(ray_settings, transactional_db, settings):  # type: ignore[no-untyped-def]
    settings.POLL_RAY_S = 0.5
    scheduler = EmbeddedScheduler(
        celery_app, {"ray": {"task": "dashboard.cluster.tasks.poll_ray_state", "schedule": 0.5}}
    )
    scheduler.start()
    yield scheduler
    scheduler.stop()


def alive_rows(page):  # type: ignore[no-untyped-def]
    return page.locator("#nodes tbody tr.node-alive")


def test_cluster_page_follows_the_cluster_live(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer, collectors, ray_settings, add_worker_node
) -> None:
    login(page, live_server_asgi, viewer)
    head = page.locator(f'#nodes tbody tr[data-node-id="{ray_settings.node_id}"]')
    expect(head).to_contain_text("head", timeout=ms(20))
    expect(head.locator("td.state")).to_have_text("ALIVE")
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page.locator('[data-source="ray"]')).to_have_class("source state-healthy",
                                                              timeout=ms(20))
    assert page.evaluate("typeof window.Plotly") == "object"
    # Which cluster, that it answers, and its one session with when it was first seen.
    expect(page.locator("#cluster-identity")).to_contain_text("active · Ray 2.60.0")
    name = Path(ray_settings.session_dir).name
    session = page.locator(f'#sessions-table tr[data-session="{name}"]')
    expect(session).to_contain_text("UTC")
    expect(session).to_contain_text("current")
    expect(session).not_to_contain_text("[object")
    expect(page.locator("#cluster-ended")).to_be_hidden()
    page.evaluate("window.__noReload = true")

    worker = add_worker_node(num_cpus=1)
    expect(alive_rows(page)).to_have_count(2, timeout=ms(60))
    expect(page.locator('[data-total="cpu"]')).to_contain_text("/ 3")
    worker_id = alive_rows(page).filter(has_not_text="head").get_attribute("data-node-id")

    stop_ray_start(worker)
    dead = page.locator(f'#nodes tbody tr[data-node-id="{worker_id}"] td.state')
    expect(dead).to_have_text("DEAD", timeout=ms(60))
    expect(alive_rows(page)).to_have_count(1)
    assert page.evaluate("window.__noReload") is True  # all of it without a reload

    # The server goes away and comes back: the page reconnects and re-reads state.
    live_server_asgi.stop()
    expect(page.locator("#live-state")).to_contain_text("reconnecting", timeout=ms(20))
    restarted = LiveServer()
    restarted.port, restarted.url = live_server_asgi.port, live_server_asgi.url
    restarted.server.config.port = live_server_asgi.port
    restarted.start()
    try:
        expect(page.locator("#live-state")).to_have_text("live", timeout=ms(30))
        expect(head.locator("td.state")).to_have_text("ALIVE")
        assert page.evaluate("window.__noReload") is True
    finally:
        restarted.stop()
