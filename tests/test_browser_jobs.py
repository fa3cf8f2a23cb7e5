"""In Chromium: the Jobs page follows Ray's job list live, long ids stay readable, an
operator can stop a running submitted job from it, and raywatch's own driver (the one
that keeps make run's local cluster up) is not listed as somebody's job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from collectors.records import JobRecord
from dashboard.cluster.views_data import jobs_payload
from dashboard.cluster.workload import ingest_jobs
from tests.conftest import LiveServer, login, off_the_loop

pytestmark = pytest.mark.django_db(transaction=True)


def job(key: str, status: str, entrypoint: str, minutes_ago: int) -> JobRecord:
    start = timezone.now() - timedelta(minutes=minutes_ago)
    return JobRecord(job_id=f"0{len(key)}000000", submission_id=key, type="SUBMISSION",
                     status=status, entrypoint=entrypoint, message="", driver_pid=4242,
                     driver_node_id="n" * 56, driver_node_ip="10.0.0.7", start_time=start,
                     end_time=None)


HOLDER = JobRecord(job_id="01000000", submission_id=None, type="DRIVER", status="RUNNING",
                   entrypoint="/srv/raywatch/.venv/bin/python -m collectors.localray "
                              "--info-file /srv/raywatch/.raywatch/local-ray.json",
                   message="", driver_pid=99, driver_node_id="n" * 56,
                   driver_node_ip="10.0.0.7", start_time=timezone.now(), end_time=None)


def test_raywatchs_own_driver_is_counted_not_listed(db) -> None:  # type: ignore[no-untyped-def]
    ingest_jobs([HOLDER, job("raysubmit_train", "RUNNING", "python train.py", 2)],
                timezone.now())
    payload = jobs_payload()
    assert [j["id"] for j in payload["jobs"]] == ["raysubmit_train"]
    assert payload["internal_hidden"] == 1


def test_jobs_arrive_live_and_a_running_one_can_be_stopped(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, operator) -> None:
    long_id = "raysubmit_" + "A1b2C3d4" * 4
    off_the_loop(ingest_jobs, [HOLDER, job(long_id, "SUCCEEDED", "python eval.py", 30)],
                 timezone.now())
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, live_server_asgi, operator, "/jobs/")
    expect(page.locator("#live-state")).to_have_text("live")
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(page.locator("#jobs-internal")).to_contain_text("raywatch's own driver")
    expect(rows.nth(0).locator("td.id code")).to_have_text(long_id)
    page.evaluate("window.__noReload = true")

    off_the_loop(ingest_jobs, [HOLDER, job(long_id, "SUCCEEDED", "python eval.py", 30),
                               job("raysubmit_grpo", "RUNNING", "python -m grpo --nodes 4", 1)],
                 timezone.now())
    new = page.locator('#jobs tr[data-job="raysubmit_grpo"]')
    expect(new).to_be_visible()
    expect(new.locator("td.status")).to_have_text("RUNNING")
    stop = new.locator("button[data-stop-job]")
    expect(stop).to_be_visible()
    box = stop.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    stop.click()
    expect(page.locator("#action-dialog")).to_be_visible()
    assert page.evaluate("window.__noReload") is True


def test_calls_running_now_arrive_live_and_an_overdue_one_shows_it(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, viewer, settings) -> None:
    from collectors.records import CallRecord
    from dashboard.cluster.calls import ingest_calls
    from dashboard.cluster.models import CallTiming, Cluster, settings_cluster_pk

    def call(task: str, name: str) -> CallRecord:
        return CallRecord(task_id=task, attempt=0, name=name, kind="ACTOR_TASK",
                          job_id="02000000", actor_id="ab" * 16, node_id="", pid=4242)

    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    t0 = timezone.now() - timedelta(minutes=5)
    # Three reward calls of ~3 s were seen to end; the fourth has run five minutes.
    CallTiming.objects.create(cluster=cluster, job_id="02000000",
                              name="AutoRewardManager.compute_reward",
                              durations=[3.0, 3.1, 2.9], updated_at=t0)
    ingest_calls([call("t-run", "Runner.run"), call("t-reward",
                  "AutoRewardManager.compute_reward")], t0, cluster)
    page.set_viewport_size({"width": 1280, "height": 900})
    login(page, live_server_asgi, viewer, "/jobs/")
    expect(page.locator("#live-state")).to_have_text("live")
    reward = page.locator('#calls tr[data-call="t-reward"]')
    expect(page.locator("#calls tbody tr").first).to_have_attribute("data-call", "t-reward")
    expect(reward.locator("td.running")).to_have_class("running bad")
    expect(reward).to_contain_text("pid 4242")
    expect(reward).to_contain_text("3 s")  # usual
    runner = page.locator('#calls tr[data-call="t-run"]')
    expect(runner).to_contain_text("not known yet")
    expect(runner.locator("td.running")).not_to_have_class("running bad")

    off_the_loop(ingest_calls, [call("t-run", "Runner.run"), call("t-gen",
                 "WorkerDict.actor_rollout_ref_generate_sequences")], timezone.now(), cluster)
    expect(page.locator('#calls tr[data-call="t-gen"]')).to_be_visible()
    expect(reward).to_have_count(0)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
