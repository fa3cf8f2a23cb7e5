"""In Chromium and the API, against a real server, a real local Ray cluster and a real
agent process: the Cluster page marks the node whose agent reports "agent connected"
with its version, turns it "agent stale" once the agent stops (within the shortened
stale window) and connected again when it is back, all without a reload; a Ray node of
another host with no agent says "no agent" and what is lost there; an agent whose node
is no Ray node is listed apart."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from collectors.agent import AGENT_VERSION
from collectors.hostinfo import host_name
from dashboard.agents import tokens
from dashboard.celery import app as celery_app
from dashboard.cluster.models import Node
from dashboard.core.scheduler import EmbeddedScheduler
from tests.agents import agent_env, gpu_record, report, running_agent
from tests.conftest import LiveServer, login, token_client, wait_for
from tests.patience import ms, patient

pytestmark = [pytest.mark.browser, pytest.mark.ray]
STALE_S = 5.0
LOST = ["gpus", "trial_logs", "process_state", "stacks", "signals"]


@pytest.fixture
def collectors(ray_settings, transactional_db, settings):  # type: ignore[no-untyped-def]
    settings.POLL_RAY_S = 0.5
    settings.AGENT_STALE_S = STALE_S
    scheduler = EmbeddedScheduler(
        celery_app, {"ray": {"task": "dashboard.cluster.tasks.poll_ray_state", "schedule": 0.5}}
    )
    scheduler.start()
    yield scheduler
    scheduler.stop()


def coverage(api) -> dict:  # type: ignore[no-untyped-def]
    return api.get("/api/agents/coverage/").json()


def test_cluster_page_shows_which_nodes_an_agent_covers(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, viewer, collectors, ray_settings, add_worker_node,
        tmp_path: Path) -> None:
    add_worker_node(num_cpus=1, hostname="node-b", node_ip="127.0.0.2")
    api = token_client(viewer)
    wait_for(lambda: Node.objects.filter(hostname="node-b", state="ALIVE").exists(), 90, 0.5,
             "node-b to join the cluster")
    head = Node.objects.get(node_id=ray_settings.node_id)
    token = tokens.issue(host_name(), None, head.started_at or head.last_seen_at)[1]
    env = agent_env(live_server_asgi.url, token, tmp_path, host_name(), head.node_ip)

    login(page, live_server_asgi, viewer)
    head_cell = page.locator(f'#nodes tr[data-node-id="{ray_settings.node_id}"] td.agent')
    node_b = Node.objects.get(hostname="node-b").node_id
    b_cell = page.locator(f'#nodes tr[data-node-id="{node_b}"] td.agent')
    page.evaluate("window.__noReload = true")

    with running_agent(env, tmp_path / "agent.log") as agent:
        expect(head_cell.locator(".coverage")).to_have_text("agent connected", timeout=ms(60))
        expect(head_cell).to_contain_text(f"v{AGENT_VERSION}")
        expect(head_cell).to_contain_text("last report")
        expect(head_cell).to_contain_text("raywatch's own host")
        # node-b is another host with no agent: everything an agent reads there is lost.
        expect(b_cell.locator(".coverage")).to_have_text("no agent")
        expect(b_cell.locator(".cov-lost")).to_contain_text("lost here")
        assert b_cell.locator(".cov-lost .cov-item").evaluate_all(
            "items => items.map(i => i.dataset.what)") == LOST
        expect(b_cell.locator('.cov-item[data-what="gpus"]')).to_have_text("GPU data")

        seen = {c["hostname"]: c for c in coverage(api)["nodes"]}
        assert seen[host_name()]["state"] == "connected"
        assert seen[host_name()]["agent"]["version"] == AGENT_VERSION
        assert seen["node-b"]["state"] == "none"
        assert [i["what"] for i in seen["node-b"]["lost"]] == LOST

        agent.terminate()
        agent.wait(patient(20))
        expect(head_cell.locator(".coverage")).to_have_text("agent stale",
                                                             timeout=(STALE_S + 20) * 1000)
        expect(head_cell).to_contain_text("no report since")
        assert coverage(api)["nodes"][0]["agent"]["stale_since"] is not None

    with running_agent(env, tmp_path / "agent.log"):  # back, with the same spool
        expect(head_cell.locator(".coverage")).to_have_text("agent connected", timeout=ms(60))
    assert page.evaluate("window.__noReload") is True

    # An agent whose node is no Ray node is shown apart, with its state.
    other = tokens.issue("gpu-elsewhere", None, head.last_seen_at)[1]
    assert report(live_server_asgi.url, other, 1, [gpu_record("GPU-elsewhere-0")]).status == 200
    row = page.locator('#agent-only-nodes tr[data-agent-node="gpu-elsewhere"]')
    expect(row.locator(".coverage")).to_have_text("agent connected", timeout=ms(20))
    assert [a["node"] for a in coverage(api)["agent_only"]] == ["gpu-elsewhere"]
