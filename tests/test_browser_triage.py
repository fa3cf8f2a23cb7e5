"""In Chromium: the home page is a triage of what needs an operator now. Firing
incidents by severity, unhealthy trials with how long, never-placeable demand, GPUs
that need a look (SIMULATED marked) and the sources' health; each line links to where
to act, and a new problem shows without a reload."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import expect

from collectors.records import GpuPoll, GpuProcessRecord, GpuSampleRecord
from dashboard.cluster.models import Demand
from dashboard.gpus.ingest import ingest_gpu_poll
from dashboard.incidents.findings import Finding
from dashboard.incidents.service import sync_findings
from dashboard.trials.models import Experiment, Trial
from tests.conftest import LiveServer, login, off_the_loop, token_client, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
TUNE_GROUP = "28b3c2ccfe692f1915cb88eefa5c020000000000"  # Tune's placement groups have no name
GiB = 1024**3


def gpu(index: int, util: float, pids: tuple[int, ...]) -> GpuSampleRecord:
    now = timezone.now()
    return GpuSampleRecord(
        node="gpu-a", gpu_index=index, uuid=f"GPU-gpu-a-{index}", at=now, name="A100",
        utilization_gpu=util, utilization_memory=util / 2, memory_used_bytes=20 * GiB,
        memory_total_bytes=80 * GiB, temperature_c=50, power_w=100, power_limit_w=400,
        sm_clock_mhz=1410, memory_clock_mhz=1593, throttle_reasons=(), ecc_corrected=0,
        ecc_uncorrected=0, mig_mode=False,
        processes=tuple(GpuProcessRecord(p, 10 * GiB) for p in pids), simulated=True)


def seed() -> dict[str, object]:
    now = timezone.now()
    experiment = Experiment.objects.create(name="asha-reward", metric="reward_mean", mode="max")
    hung = Trial.objects.create(experiment=experiment, trial_id="train_0a1b2_00003",
                                status="RUNNING", node_ip="10.0.0.7", iteration=41,
                                last_ingested_at=now - timedelta(minutes=9))
    healthy = Trial.objects.create(experiment=experiment, trial_id="train_0a1b2_00001",
                                   status="RUNNING", node_ip="10.0.0.7", iteration=80,
                                   last_ingested_at=now)
    stalled = Finding("trial_stalled", f"trial:asha-reward/{hung.trial_id}", "critical",
                      f"{hung.trial_id}: no result for 9 min (usually every 20 s)")
    infeasible = Finding("demand_infeasible", "actor:BigModel", "warning",
                         "actor BigModel asks for 16 GPU; the largest node has 8")
    context = {stalled.subject: {"trial": hung, "experiment": experiment.name,
                                 "node_ip": "10.0.0.7"}}
    off_the_loop(sync_findings, {"trial_stalled", "demand_infeasible"},
                 [stalled, infeasible], now - timedelta(minutes=3), context)
    Demand.objects.create(kind="actor", key="actor:BigModel", name="BigModel",
                          bundles=[{"GPU": 16.0}], feasible=False,
                          explanation="the largest node has 8 GPU",
                          first_seen_at=now - timedelta(minutes=12), updated_at=now)
    Demand.objects.create(kind="placement_group", key=TUNE_GROUP, job_id="02000000",
                          bundles=[{"CPU": 1.0, "GPU": 1.0}], feasible=True,
                          explanation="waits for resources held by trial train_0a1b2_00001",
                          first_seen_at=now - timedelta(minutes=2), updated_at=now)
    # The search's next trial, queued behind its own running one: counted, not listed.
    Demand.objects.create(kind="placement_group", key="f" * 40, job_id="03000000",
                          bundles=[{"CPU": 1.0, "GPU": 1.0}], feasible=True, queued=True,
                          explanation="queued behind its own job's trials: trial x",
                          first_seen_at=now - timedelta(minutes=30), updated_at=now)
    poll = GpuPoll(node="gpu-a", at=now, gpus=(gpu(0, 85, (4242,)), gpu(1, 0, (4343,))),
                   simulated=True)
    off_the_loop(ingest_gpu_poll, poll, "10.0.0.7", now)
    return {"hung": hung, "healthy": healthy, "experiment": experiment}


def test_home_shows_what_needs_an_operator_and_where_to_act(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, operator) -> None:
    rows = seed()
    hung = rows["hung"]
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, live_server_asgi, operator, "/")
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate("window.__noReload = true")

    # Firing incidents, the most severe first, each linking to its incident.
    firing = page.locator("#firing-table tbody tr")
    expect(firing).to_have_count(2)
    expect(firing.nth(0).locator("td").nth(0)).to_have_text("critical")
    expect(firing.nth(0)).to_contain_text("no result for 9 min")
    expect(firing.nth(0)).to_contain_text("3 min")
    expect(firing.nth(1).locator("td").nth(0)).to_have_text("warning")
    # A severity reads as one word on one line (the 1280 px layout once cut "warnin g").
    lines = page.evaluate("""() => [...document.querySelectorAll('#firing-table td[class^=sev-]')]
        .map(td => { const r = document.createRange(); r.selectNodeContents(td);
                     return r.getClientRects().length; })""")
    assert lines == [1, 1], lines
    expect(page.locator('[data-card="incidents"] p')).to_have_text("1 critical, 1 warning")

    # The hung trial, what is wrong, for how long, silent for how long; the healthy one
    # is not listed.
    trial_row = page.locator(f'#trials-table tr[data-trial="{hung.trial_id}"]')
    expect(trial_row).to_contain_text("stalled")
    expect(trial_row.locator("td").nth(2)).to_have_text("3 min")
    expect(trial_row.locator("td").nth(3)).to_have_text("9 min")
    expect(page.locator("#trials-table tbody tr")).to_have_count(1)

    # Demand no node can ever place, and for how long it waited.
    demands = page.locator("#demands-table tbody tr")
    expect(demands).to_have_count(2)
    demand = demands.nth(0)
    expect(demand).to_contain_text("BigModel")
    expect(demand).to_contain_text("GPU:16")
    expect(demand).to_contain_text("no node can ever fit it")
    expect(demand).to_contain_text("12 min")
    # An unnamed placement group (Tune's) reads as its kind, a short id and its job; the
    # full id is the cell's title, not 40 hex digits broken over lines.
    group = demands.nth(1).locator("td").nth(0)
    expect(group).to_contain_text(f"placement group {TUNE_GROUP[:8]}… of job 02000000")
    expect(group).not_to_contain_text(TUNE_GROUP)
    expect(group).to_have_attribute("title", TUNE_GROUP)
    expect(page.locator('[data-card="demands"] p')).to_have_text(
        "1 infeasible, 1 waiting, 1 queued in a search")

    # GPUs: the idle one held by a process needs a look, the busy one does not; the
    # data is simulated and says so.
    expect(page.locator("#triage-simulated")).to_be_visible()
    gpus = page.locator("#gpus-table tbody tr")
    expect(gpus).to_have_count(1)
    expect(gpus.nth(0)).to_contain_text("gpu-a GPU 1")
    expect(gpus.nth(0)).to_contain_text("SIMULATED")
    expect(gpus.nth(0).locator("td").nth(1)).to_have_text("idle")
    expect(page.locator('[data-card="gpus"] p')).to_contain_text("1 busy of 2")

    # Every action is reachable: the action buttons' column is on screen at 1,280 px.
    # (A late push's re-render may replace the row just as it is measured: None then.)
    act = trial_row.locator("td.act a").first
    box = wait_for(act.bounding_box, 15, 0.2, "the action link's box")
    assert box["x"] + box["width"] <= 1280
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280

    # A new problem arrives without a reload.
    now = timezone.now()
    other = Trial.objects.create(experiment=rows["experiment"], trial_id="train_0a1b2_00005",
                                 status="ERROR", node_ip="10.0.0.8", iteration=3,
                                 last_ingested_at=now)
    errored = Finding("trial_errored", f"trial:asha-reward/{other.trial_id}", "warning",
                      f"{other.trial_id} errored: CUDA out of memory")
    off_the_loop(sync_findings, {"trial_errored"}, [errored], now,
                 {errored.subject: {"trial": other, "experiment": "asha-reward"}})
    new_row = page.locator(f'#trials-table tr[data-trial="{other.trial_id}"]')
    expect(new_row).to_contain_text("errored")
    expect(new_row).to_contain_text("CUDA out of memory")
    assert page.evaluate("window.__noReload") is True

    # Where to act: the trial's page, which has the terminate button.
    trial_row.locator("td.act a").first.click()
    page.wait_for_url(f"{live_server_asgi.url}/trials/{hung.pk}/")


def test_the_triage_api_is_for_viewers_only(viewer) -> None:  # type: ignore[no-untyped-def]
    seed()
    assert Client().get("/api/triage/").status_code in (401, 403)
    assert Client().get("/").status_code == 302  # to the login page
    body = token_client(viewer).get("/api/triage/").json()
    assert [r["severity"] for r in body["incidents"]["rows"]] == ["critical", "warning"]
    assert [t["problems"] for t in body["trials"]] == [["stalled"]]
    assert body["demands"]["rows"][0]["infeasible"] is True
    assert len(body["demands"]["rows"]) == 2 and body["demands"]["queued"] == 1
    assert body["gpus"]["states"] == {"busy": 1, "idle": 1}
    assert body["simulated"] is True
