"""One cluster's history on its page and in /api/cluster/: alive nodes over time (a step
at each start and end), and GPU-hours per experiment (each trial's GPUs, as its actor
asked Ray for them, times how long it ran)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.cluster.models import Actor, Cluster, Node
from dashboard.trials.detect import evaluate_trials
from dashboard.trials.models import Experiment, Trial
from tests.conftest import mark_ray_current, token_client

pytestmark = pytest.mark.django_db


def test_nodes_over_time_and_gpu_hours_per_experiment(viewer, settings) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    hours = lambda n: now - timedelta(hours=n)  # noqa: E731
    cluster = Cluster.objects.create(name="gpu-east", first_seen_at=hours(9),
                                     state_since=hours(9))
    Node.objects.create(cluster=cluster, node_id="a", node_ip="10.0.0.1", state="DEAD",
                        started_at=hours(3), ended_at=hours(1), last_seen_at=hours(1))
    Node.objects.create(cluster=cluster, node_id="b", node_ip="10.0.0.2", state="ALIVE",
                        started_at=hours(2), last_seen_at=now)
    other = Cluster.objects.create(name="other", first_seen_at=now, state_since=now)
    Node.objects.create(cluster=other, node_id="c", node_ip="10.0.0.1", state="ALIVE",
                        started_at=hours(5), last_seen_at=now)
    grpo = Experiment.objects.create(cluster=cluster, name="grpo")
    sweep = Experiment.objects.create(cluster=cluster, name="sweep")
    for n, (experiment, gpus, ran_h) in enumerate([(grpo, 8.0, 1.5), (grpo, 8.0, 0.5),
                                                  (sweep, 1.0, 2.0), (sweep, None, 3.0)]):
        trial = Trial.objects.create(experiment=experiment, trial_id=f"t_{n}", gpus=gpus,
                                     last_result_at=hours(1))
        Trial.objects.filter(pk=trial.pk).update(first_seen_at=hours(1 + ran_h))
    reply = token_client(viewer).get("/api/cluster/?cluster=gpu-east")
    assert reply.status_code == 200
    history = reply.json()["history"]
    assert [p["alive"] for p in history["nodes"]] == [1, 2, 1]  # a, then b, then a ended
    assert [(r["experiment"], r["gpu_hours"], r["trials"]) for r in history["gpu_hours"]] == [
        ("grpo", 16.0, 2), ("sweep", 2.0, 1)]


def test_a_trial_holds_the_gpus_its_actor_asked_ray_for(settings) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    cluster = Cluster.objects.get_or_create(
        name=settings.CLUSTER_NAME, defaults={"first_seen_at": now, "state_since": now})[0]
    Node.objects.create(cluster=cluster, node_id="n1", node_ip="10.0.0.5", state="ALIVE",
                        last_seen_at=now)
    Actor.objects.create(cluster=cluster, actor_id="a1", state="ALIVE", pid=4242,
                         node_id="n1", required_resources={"CPU": 1.0, "GPU": 2.0},
                         first_seen_at=now, updated_at=now)
    experiment = Experiment.objects.create(cluster=cluster, name="grpo")
    trial = Trial.objects.create(experiment=experiment, trial_id="t_0", pid=4242,
                                 node_ip="10.0.0.5", tune_status="RUNNING",
                                 last_result_at=now, iteration=1)
    mark_ray_current()
    evaluate_trials(timezone.now())
    trial.refresh_from_db()
    assert (trial.process_alive, trial.gpus) == (True, 2.0)


@pytest.mark.browser
def test_the_cluster_page_shows_gpu_hours_and_nodes_over_time(  # type: ignore[no-untyped-def]
        page, live_server_asgi, viewer) -> None:
    from playwright.sync_api import expect

    from tests.conftest import login

    now = timezone.now()
    cluster = Cluster.objects.create(name="gpu-east", first_seen_at=now, state_since=now)
    Cluster.objects.create(name="other", first_seen_at=now, state_since=now)
    Node.objects.create(cluster=cluster, node_id="b", node_ip="10.0.0.2", state="ALIVE",
                        started_at=now - timedelta(hours=2), last_seen_at=now)
    grpo = Experiment.objects.create(cluster=cluster, name="grpo")
    trial = Trial.objects.create(experiment=grpo, trial_id="t_0", gpus=8.0, last_result_at=now)
    Trial.objects.filter(pk=trial.pk).update(first_seen_at=now - timedelta(hours=1.5))
    login(page, live_server_asgi, viewer, "/cluster/?cluster=gpu-east")
    row = page.locator('#gpu-hours tbody tr[data-experiment="grpo"]')
    expect(row).to_contain_text("12")  # 8 GPUs x 1.5 h
    expect(row.locator("a")).to_have_attribute("href", f"/experiments/{grpo.pk}/")
    expect(page.locator("#nodes-chart .main-svg").first).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("[object")
