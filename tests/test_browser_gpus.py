"""In Chromium: the GPU wall, a GPU's page, a node's page and the pending-demand page
follow what the agents and Ray report without a reload; a week of history zooms out
through the minute rollups and back in to single readings."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import expect

from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord
from dashboard.cluster.models import Demand, Node
from dashboard.cluster.workload import ingest_demands
from dashboard.core.models import SourceHealth
from dashboard.gpus.ingest import ingest_gpu_poll
from dashboard.gpus.models import Gpu, GpuSample
from dashboard.gpus.retention import roll_up
from dashboard.trials.models import Experiment, Trial
from tests.conftest import PASSWORD, LiveServer, login, off_the_loop, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
GiB = 1024**3
MAX_POINTS = 2000


def reading(node: str, index: int, util: float, at: datetime, *, simulated: bool = False,
            pids: tuple[int, ...] = ()) -> GpuSampleRecord:
    return GpuSampleRecord(
        node=node, gpu_index=index, uuid=f"GPU-{node}-{index}", at=at,
        name="NVIDIA A100-SXM4-80GB", utilization_gpu=util, utilization_memory=util / 2,
        memory_used_bytes=int((4 + util / 4) * GiB), memory_total_bytes=80 * GiB,
        temperature_c=40 + util / 4, power_w=60 + 3 * util, power_limit_w=400.0,
        sm_clock_mhz=1410, memory_clock_mhz=1593, throttle_reasons=(), ecc_corrected=0,
        ecc_uncorrected=0, mig_mode=False,
        processes=tuple(GpuProcessRecord(pid, 3 * GiB) for pid in pids), simulated=simulated,
    )


def ingest(node: str, node_ip: str, readings: list[GpuSampleRecord]) -> None:
    at = readings[0].at
    poll = GpuPoll(node=node, at=at, gpus=tuple(readings), simulated=readings[0].simulated)
    off_the_loop(ingest_gpu_poll, poll, node_ip, at)


def tile(page, uuid: str):  # type: ignore[no-untyped-def]
    return page.locator(f'.gpu-tile[data-uuid="{uuid}"]')


def chart(page, chart_id: str, expression: str) -> Any:  # type: ignore[no-untyped-def]
    return page.evaluate(f"(() => {{ const c = document.getElementById('{chart_id}'); "
                         f"return {expression}; }})()")


def utilization_trace(page) -> dict:  # type: ignore[no-untyped-def]
    return chart(page, "util-chart",
                 "(({x, y}) => ({x, y}))(c.data.find(t => t.name === 'utilization'))")


def make_node(node_id: str, node_ip: str) -> Node:
    return Node.objects.create(
        node_id=node_id, node_ip=node_ip, hostname="gpu-a", state="ALIVE",
        resources={"CPU": {"total": 32.0, "used": 4.0}, "GPU": {"total": 2.0, "used": 1.0}},
        object_store_total_bytes=10 * GiB, object_store_used_bytes=2 * GiB,
        object_store_spilled_bytes=3 * GiB, last_seen_at=timezone.now(),
    )


# --- who may open the pages --------------------------------------------------------------
def test_gpu_pages_answer_viewers_and_send_anonymous_to_login(viewer) -> None:  # type: ignore[no-untyped-def]
    ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, 50, timezone.now())])
    node = make_node("ab" * 28, "10.0.0.1")
    pages = ["/gpus/", "/gpus/GPU-gpu-a-0/", f"/nodes/{node.node_id}/", "/demands/"]
    anonymous, signed_in = Client(), Client()
    assert signed_in.login(username=viewer.username, password=PASSWORD)
    for path in pages:
        refused = anonymous.get(path)
        assert refused.status_code == 302 and refused["Location"].startswith("/login/"), path
        assert signed_in.get(path).status_code == 200, path
    assert signed_in.get("/gpus/GPU-nowhere/").status_code == 404


# --- the wall ---------------------------------------------------------------------------
@pytest.mark.browser
def test_gpu_wall_shows_every_node_and_follows_polls(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    now = timezone.now()
    ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, 90, now), reading("gpu-a", 1, 40, now)])
    ingest("gpu-b", "10.0.0.2", [reading("gpu-b", 0, 70, now), reading("gpu-b", 1, 60, now)])
    login(page, live_server_asgi, viewer, "/gpus/")
    expect(page.locator(".gpu-tile")).to_have_count(4)
    expect(page.locator('.gpu-node[data-node="gpu-a"] .gpu-tile')).to_have_count(2)
    expect(page.locator('.gpu-node[data-node="gpu-b"] .gpu-tile')).to_have_count(2)
    busy = tile(page, "GPU-gpu-a-0")
    expect(busy.locator('[data-field="utilization"]')).to_have_text("90%")
    expect(busy).to_have_class(re.compile(r"\bstate-busy\b"))
    expect(busy.locator('[data-field="memory"]')).to_have_text("26.5 GiB / 80.0 GiB")
    expect(page.locator("#simulated-banner")).to_be_hidden()
    expect(page.locator("a.current")).to_have_text("GPUs")
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate("window.__noReload = true")

    ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, 0, timezone.now()),
                                 reading("gpu-a", 1, 40, timezone.now())])
    expect(busy.locator('[data-field="utilization"]')).to_have_text("0%")
    expect(busy).to_have_class(re.compile(r"\bstate-free\b"))
    expect(busy).not_to_have_class(re.compile(r"\bstate-busy\b"))
    expect(page.locator('[data-state-count="free"] b')).to_have_text("1")
    expect(page.locator('[data-state-count="busy"] b')).to_have_text("3")

    page.fill("#gpu-filter", "10.0.0.2")
    expect(page.locator(".gpu-tile:visible")).to_have_count(2)
    expect(page.locator('.gpu-node[data-node="gpu-a"]')).to_be_hidden()
    page.fill("#gpu-filter", "")
    page.click('[data-state-count="free"]')
    expect(page.locator(".gpu-tile:visible")).to_have_count(1)
    page.click('[data-state-count="free"]')
    expect(page.locator(".gpu-tile:visible")).to_have_count(4)

    # A node of the demo's simulated source joins: its tiles say so, and so does the page.
    ingest("sim-c", "10.0.0.3", [reading("sim-c", 0, 30, timezone.now(), simulated=True)])
    expect(page.locator("#simulated-banner")).to_be_visible()
    expect(page.locator("#simulated-banner")).to_contain_text("SIMULATED data")
    expect(tile(page, "GPU-sim-c-0").locator(".badge.simulated")).to_be_visible()
    expect(busy.locator(".badge.simulated")).to_be_hidden()
    expect(page.locator("#gpu-count")).to_have_text("5 GPUs on 3 nodes")
    assert page.evaluate("window.__noReload") is True

    busy.click()
    page.wait_for_url(f"{live_server_asgi.url}/gpus/GPU-gpu-a-0/")
    expect(page.locator("#gpu-title")).to_have_attribute("data-uuid", "GPU-gpu-a-0")


@pytest.mark.browser
def test_a_large_wall_is_paged_by_node_and_follows_only_its_page(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    """40 nodes: the wall draws 32 (whole nodes, in name order) and pages to the rest;
    the filter asks the server and is kept in the address; a poll updates a shown tile
    in place and adds no tile of a node on another page."""
    from collectors.records import GpuPoll
    from dashboard.gpus.ingest import ingest_gpu_polls

    def poll(nodes: range, util: float) -> None:
        now = timezone.now()
        off_the_loop(ingest_gpu_polls, [
            (GpuPoll(node=f"node-{n:02d}", at=now, gpus=tuple(
                reading(f"node-{n:02d}", i, util, now) for i in range(2))), f"10.3.0.{n}")
            for n in nodes], now)

    poll(range(40), 50)
    login(page, live_server_asgi, viewer, "/gpus/")
    expect(page.locator(".gpu-node")).to_have_count(32)
    expect(page.locator(".gpu-tile")).to_have_count(64)
    expect(page.locator("#page-of")).to_have_text("nodes 1\u201332 of 40")
    expect(page.locator("#gpu-count")).to_have_text("80 GPUs on 40 nodes")
    expect(page.locator('[data-state-count="busy"] b')).to_have_text("80")
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate("window.__noReload = true")

    poll(range(40), 90)  # every node: the shown tiles change in place, no other appears
    expect(tile(page, "GPU-node-05-1").locator('[data-field="utilization"]')).to_have_text("90%")
    expect(page.locator(".gpu-tile")).to_have_count(64)
    expect(page.locator('.gpu-node[data-node="node-35"]')).to_have_count(0)

    page.click("#page-next")
    expect(page.locator("#page-of")).to_have_text("nodes 33\u201340 of 40")
    expect(page.locator(".gpu-node")).to_have_count(8)
    expect(page.locator(".gpu-node").first).to_have_attribute("data-node", "node-32")
    assert "page=2" in page.url
    page.fill("#gpu-filter", "10.3.0.7")
    expect(page.locator(".gpu-node")).to_have_count(1)
    expect(page.locator(".gpu-node")).to_have_attribute("data-node", "node-07")
    expect(page.locator("#gpu-count")).to_have_text("80 GPUs on 40 nodes · 2 shown")
    expect(page.locator("#wall-pager")).to_be_hidden()
    assert "q=10.3.0.7" in page.url and "page=" not in page.url
    assert page.evaluate("window.__noReload") is True


# --- one GPU ----------------------------------------------------------------------------
@pytest.mark.browser
def test_gpu_page_charts_grow_live_and_name_the_orphan(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    now = timezone.now()
    SourceHealth.objects.create(source="ray", state="healthy", last_success_at=now,
                                interval_s=3600)  # Ray's view counts as current
    experiment = Experiment.objects.create(name="gone-search")
    trial = Trial.objects.create(experiment=experiment, trial_id="t_0001", status="ERROR",
                                 node_ip="10.0.0.1", pid=4242)
    for seconds_ago, util in ((40, 10), (30, 20), (20, 30), (10, 40), (0, 50)):
        at = now - timedelta(seconds=seconds_ago)
        ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, util, at, pids=(4242,))])
    login(page, live_server_asgi, viewer, "/gpus/GPU-gpu-a-0/")
    expect(page.locator("#util-chart")).to_have_attribute("data-points", "5")
    expect(page.locator('[data-range="1h"]')).to_have_class(re.compile(r"\bcurrent\b"))
    assert utilization_trace(page)["y"] == [10, 20, 30, 40, 50]
    assert chart(page, "memory-chart", "c.data[0].x.length") == 5

    orphan = page.locator('#processes tr[data-pid="4242"]')
    expect(orphan).to_have_class(re.compile(r"\bowner-orphan\b"))
    expect(orphan).to_contain_text("left over by trial t_0001 (ERROR)")
    expect(orphan.locator("a")).to_have_attribute("href", f"/trials/{trial.pk}/")
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate("window.__noReload = true")

    bucket_s = float(page.locator("#util-chart").get_attribute("data-bucket-s") or 1)
    for n, util, pids in ((6, 77, (4242,)), (7, 64, ())):
        time.sleep(bucket_s)  # each reading in a bucket of its own
        ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, util, timezone.now(), pids=pids)])
        expect(page.locator("#util-chart")).to_have_attribute("data-points", str(n))
        assert utilization_trace(page)["y"][-1] == util
        expect(page.locator('[data-fact="utilization"]')).to_have_text(f"{util}%")
        if pids:
            expect(page.locator('[data-fact="state"]')).to_have_text("orphan")
    for other in ("memory-chart", "power-chart", "temperature-chart"):
        assert chart(page, other, "c.data[0].x.length") == 7, other
    assert chart(page, "power-chart", "c.data[0].y.at(-1)") == 60 + 3 * 64
    # The process went away with the last poll's empty process list.
    expect(page.locator("#processes tbody tr")).to_have_count(0)
    expect(page.locator("#no-processes")).to_be_visible()
    assert page.evaluate("window.__noReload") is True


@pytest.mark.browser
def test_a_week_of_history_zooms_out_and_back_in(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    now = timezone.now()
    ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, 65, now)])
    gpu = Gpu.objects.get(uuid="GPU-gpu-a-0")
    start = (now - timedelta(days=7)).replace(second=0, microsecond=0) + timedelta(minutes=1)
    minutes = int((now - start).total_seconds() // 60)
    # One reading a minute for a week; each day at its own level (5%, 15%, ... 65%).
    GpuSample.objects.bulk_create(
        [GpuSample(gpu=gpu, at=start + timedelta(minutes=i), utilization_gpu=5 + 10 * (i // 1440),
                   memory_used_bytes=8 * GiB, temperature_c=50.0, power_w=200.0)
         for i in range(minutes)],
        batch_size=5000,
    )
    assert roll_up(now) >= minutes - 1
    login(page, live_server_asgi, viewer, f"/gpus/{gpu.uuid}/")
    expect(page.locator("#util-chart")).to_have_attribute("data-source", "raw")

    clicked = time.monotonic()
    page.click('[data-range="7d"]')
    expect(page.locator("#util-chart")).to_have_attribute("data-source", "rollup")
    seen_s = time.monotonic() - clicked
    print(f"\n7-day chart: {chart(page, 'util-chart', 'c.dataset.loadMs')} ms fetch+render in "
          f"the page, {seen_s * 1000:.0f} ms from the click as the test saw it, "
          f"{chart(page, 'util-chart', 'c.dataset.points')} points per trace")
    assert float(page.locator("#util-chart").get_attribute("data-bucket-s") or 0) >= 60
    lengths = chart(page, "util-chart", "c.data.map(t => t.x.length)")
    assert all(200 <= n <= MAX_POINTS for n in lengths), lengths
    # The whole week: first point within the range's first day, last within its last.
    hours_in = chart(page, "util-chart", "((Date.parse(c.data[2].x[0].replace(' ', 'T')) "
                                         "- (Date.now() - 7 * 864e5)) / 36e5)")
    bucket_h = float(page.locator("#util-chart").get_attribute("data-bucket-s") or 0) / 3600
    assert -bucket_h <= hours_in < 24, hours_in  # a bucket starts at or before the range
    hours_left = chart(page, "util-chart", "(Date.now() - Date.parse(c.data[2].x.at(-1)"
                                           ".replace(' ', 'T'))) / 36e5")
    assert 0 <= hours_left < 24, hours_left
    week = utilization_trace(page)["y"]
    assert week[0] == 5 and week[-2] == 65, (week[0], week[-2])

    # Drag-zoom to twenty minutes three days ago: the server sends every reading there.
    zoom_from = start + timedelta(days=3, hours=2)
    page.evaluate("""([a, b]) => {
        const shown = (ms) => window.raywatch.history.axisTime(ms);
        Plotly.relayout('util-chart', {'xaxis.range[0]': shown(a), 'xaxis.range[1]': shown(b)});
    }""", [zoom_from.timestamp() * 1000, (zoom_from + timedelta(minutes=20)).timestamp() * 1000])
    expect(page.locator("#util-chart")).to_have_attribute("data-source", "raw")
    expect(page.locator("#util-chart")).to_have_attribute("data-live", "false")
    expect(page.locator('[data-range="7d"]')).not_to_have_class(re.compile(r"\bcurrent\b"))
    zoomed = utilization_trace(page)
    assert len(zoomed["x"]) == 20 and set(zoomed["y"]) == {35}, zoomed


# --- a node -----------------------------------------------------------------------------
@pytest.mark.browser
def test_node_page_shows_its_gpus_and_their_history(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    node = make_node("cd" * 28, "10.0.0.1")
    now = timezone.now()
    for seconds_ago in (30, 20, 10):
        at = now - timedelta(seconds=seconds_ago)
        ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, 80, at), reading("gpu-a", 1, 20, at)])
    ingest("gpu-b", "10.0.0.2", [reading("gpu-b", 0, 50, now)])
    login(page, live_server_asgi, viewer, f"/nodes/{node.node_id}/")
    expect(page.locator('[data-fact="spilled"]')).to_have_text("3.0 GiB")
    expect(page.locator('[data-fact="object_store"]')).to_have_text("2.0 GiB / 10.0 GiB")
    expect(page.locator('#resources tr[data-resource="GPU"]')).to_contain_text("1")
    expect(page.locator("#node-gpus .gpu-tile")).to_have_count(2)  # not gpu-b's
    for chart_id in ("util-chart", "memory-chart", "power-chart", "temperature-chart"):
        expect(page.locator(f"#{chart_id}")).to_have_attribute("data-traces", "2")
    assert chart(page, "util-chart", "c.data.map(t => [t.name, t.y.length])") == [
        ["GPU 0", 3], ["GPU 1", 3]]
    expect(page.locator("#live-state")).to_have_text("live")
    ingest("gpu-a", "10.0.0.1", [reading("gpu-a", 0, 0, timezone.now()),
                                 reading("gpu-a", 1, 20, timezone.now())])
    expect(tile(page, "GPU-gpu-a-0").locator('[data-field="utilization"]')).to_have_text("0%")


# --- pending demand ---------------------------------------------------------------------
@pytest.mark.browser
def test_pending_page_explains_and_follows_demand(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    now = timezone.now()
    Demand.objects.create(
        kind="placement_group", key="pg-7f3a", name="trainer-pg",
        bundles=[{"GPU": 1, "CPU": 2}] * 4, strategy="STRICT_PACK", feasible=False,
        explanation="GPU: asks 4, largest node has 2", first_seen_at=now - timedelta(seconds=95),
        updated_at=now,
    )
    Demand.objects.create(
        kind="actor", key="a1b2c3", name="Trainer", bundles=[{"GPU": 1}], feasible=True,
        explanation="waits for resources held by trial t_0002 (GPU: 1 on 10.0.0.1)",
        lead="waits for resources held by:",
        blockers=[{"label": "trial t_0002", "node_id": "ef" * 28, "node_ip": "10.0.0.1",
                   "resources": {"GPU": 1}}],
        first_seen_at=now - timedelta(seconds=20), updated_at=now,
    )
    Demand.objects.create(
        kind="placement_group", key="pg-8e1b", job_id="02000000", bundles=[{"GPU": 1}],
        feasible=True, queued=True,
        explanation="queued behind its own job's trials: trial t_0002 (GPU: 1 on 10.0.0.1)",
        first_seen_at=now - timedelta(seconds=600), updated_at=now,
    )
    login(page, live_server_asgi, viewer, "/demands/")
    rows = page.locator("#demands tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("a.current")).to_have_text("Pending")
    expect(page.locator("#demand-count")).to_have_text(
        "1 infeasible, 1 waiting, 1 queued in a search")
    never = page.locator('tr[data-demand="placement_group:pg-7f3a"]')
    expect(never.locator(".verdict-infeasible")).to_have_text(
        "infeasible — no node can ever fit it")
    expect(never).to_contain_text("GPU: asks 4, largest node has 2")
    expect(never.locator("td.asks")).to_contain_text("4 \N{MULTIPLICATION SIGN} (GPU: 1, CPU: 2)")
    expect(never.locator("td.asks")).to_contain_text("strategy: STRICT_PACK")
    waits = page.locator('tr[data-demand="actor:a1b2c3"]')
    expect(waits.locator(".verdict-waits")).to_have_text("waits")
    expect(waits.locator(".blockers li")).to_have_text("trial t_0002 holds GPU: 1 on 10.0.0.1")
    expect(waits.locator(".blockers a")).to_have_attribute("href", f"/nodes/{'ef' * 28}/")
    # The blocker is named once, in the list with its node's link, not in the lead too.
    expect(waits.locator(".explanation")).to_have_text("waits for resources held by:")
    assert waits.locator("td.verdict").inner_text().count("t_0002") == 1
    queue = page.locator('tr[data-demand="placement_group:pg-8e1b"]')
    expect(queue.locator(".verdict-queued")).to_have_text("queued")
    expect(queue).to_contain_text("queued behind its own job's trials")
    expect(never.locator("td.waiting")).to_have_text(re.compile(r"^1 min( \d+ s)?$"))
    ticking = never.locator("td.waiting").inner_text()
    wait_for(lambda: never.locator("td.waiting").inner_text() != ticking, 5, 0.2,
             "the waiting time to tick")
    expect(page.locator("#live-state")).to_have_text("live")

    off_the_loop(ingest_demands, [], timezone.now())  # Ray lists nothing pending any more
    expect(rows).to_have_count(0)
    expect(page.locator("#no-demands")).to_be_visible()
