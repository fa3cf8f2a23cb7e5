"""The API behind the trial table and the trial page: each trial's best by any metric,
every firing incident in its health, the experiments' last activity, one metric of many
trials by iteration, and a trial's output with the reason when Ray cannot give it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from collectors.localray import free_port
from dashboard.cluster.models import Actor, Node
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, StepResult, Trial
from tests.conftest import api_token

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def api(user) -> Client:  # type: ignore[no-untyped-def]
    return Client(HTTP_AUTHORIZATION=f"Token {api_token(user)}")


@pytest.fixture
def search(db: None) -> Experiment:
    """Three trials of a search for max reward_mean: t0 peaks at 5 and ends at 2; t1 was
    retried (its second attempt is the one drawn); t2 has no reward yet."""
    experiment = Experiment.objects.create(name="ppo", metric="reward_mean", mode="max")
    rewards = {"t0_00000": {1: [1.0, 5.0, 2.0]}, "t1_00001": {1: [9.0, 9.5], 2: [3.0, 4.0]},
               "t2_00002": {}}
    for tid, attempts in rewards.items():
        values = [v for vs in attempts.values() for v in vs]
        trial = Trial.objects.create(
            experiment=experiment, trial_id=tid, status="RUNNING", attempt=max(attempts, default=1),
            metric_range={"reward_mean": [min(values), max(values)]} if values else {},
            last_result_at=NOW)
        StepResult.objects.bulk_create([
            StepResult(trial=trial, attempt=a, iteration=i, ingested_at=NOW,
                       metrics={"reward_mean": v, "kl": 0.01})
            for a, vs in attempts.items() for i, v in enumerate(vs, start=1)])
    return experiment


def test_best_follows_the_search_and_health_lists_every_incident(search, viewer) -> None:  # type: ignore[no-untyped-def]
    t0 = Trial.objects.get(trial_id="t0_00000")
    for kind in ("step_time_regression", "trial_stalled"):
        Incident.objects.create(kind=kind, subject=f"{kind}:t0", summary=kind, trial=t0,
                                opened_at=NOW, updated_at=NOW)
    rows = {r["trial_id"]: r for r in api(viewer).get("/api/trials/?experiment=ppo").json()}
    assert rows["t0_00000"]["best_value"] == 5.0  # not the last (2.0) nor the lowest
    assert rows["t0_00000"]["metric_range"] == {"reward_mean": [1.0, 5.0]}
    assert rows["t2_00002"]["best_value"] is None
    assert rows["t0_00000"]["health"] == "stalled"
    assert rows["t0_00000"]["health_all"] == ["stalled", "slow"]
    assert rows["t1_00001"]["health_all"] == [] and rows["t1_00001"]["health"] == "ok"
    search.mode = "min"
    search.save()
    rows = {r["trial_id"]: r for r in api(viewer).get("/api/trials/?experiment=ppo").json()}
    assert rows["t0_00000"]["best_value"] == 1.0


def test_experiments_updated_moves_with_their_trials(search, viewer, client) -> None:  # type: ignore[no-untyped-def]
    from dashboard.trials.views_data import experiments_payload

    before = experiments_payload()[0]["updated_at"]
    Experiment.objects.filter(pk=search.pk).update(updated_at=NOW - timedelta(days=1))
    Trial.objects.get(trial_id="t1_00001").save()  # a new result, a status change
    after = experiments_payload()[0]["updated_at"]
    assert after >= before and after > (NOW - timedelta(days=1)).isoformat()


def test_curves_draw_each_trials_current_attempt(search, viewer) -> None:  # type: ignore[no-untyped-def]
    reply = api(viewer).get(f"/api/experiments/{search.pk}/curves/?metric=reward_mean")
    assert reply.status_code == 200
    body = reply.json()
    assert (body["metric"], body["mode"], body["trials"], body["shown"]) == (
        "reward_mean", "max", 3, 2)
    curves = {c["trial_id"]: (c["x"], c["y"]) for c in body["curves"]}
    assert curves == {"t0_00000": ([1, 2, 3], [1.0, 5.0, 2.0]),
                      "t1_00001": ([1, 2], [3.0, 4.0])}  # attempt 2 only


def test_curves_keep_the_best_trials_by_mode(search, viewer) -> None:  # type: ignore[no-untyped-def]
    url = f"/api/experiments/{search.pk}/curves/?metric=reward_mean&trials=1"
    assert [c["trial_id"] for c in api(viewer).get(url).json()["curves"]] == ["t1_00001"]
    assert [c["trial_id"] for c in api(viewer).get(url + "&mode=min").json()["curves"]] == [
        "t0_00000"]


def test_curves_refuse_bad_requests(search, viewer, roleless) -> None:  # type: ignore[no-untyped-def]
    base = f"/api/experiments/{search.pk}/curves/"
    for query in ("", "?metric=", "?metric=x&mode=up", "?metric=x&trials=0",
                  "?metric=" + "m" * 201):
        reply = api(viewer).get(base + query)
        assert reply.status_code == 400, query
    assert api(viewer).get("/api/experiments/999999/curves/?metric=x").status_code == 404
    assert api(roleless).get(base + "?metric=kl").status_code == 403
    assert api(viewer).get(base + "?metric=nothing").json()["curves"] == []


def output_of(search) -> int:  # type: ignore[no-untyped-def]
    return Trial.objects.get(experiment=search, trial_id="t0_00000").pk


def test_output_says_why_it_is_not_there(search, viewer, settings) -> None:  # type: ignore[no-untyped-def]
    reply = api(viewer).get(f"/api/trials/{output_of(search)}/output")
    assert reply.status_code == 200
    assert reply.json()["stdout"] is None
    assert "has not reported a process yet" in reply.json()["reason"]

    Trial.objects.filter(trial_id="t0_00000").update(pid=4321, node_ip="10.0.0.9")
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = None
    settings.LOCAL_RAY_FILE = None
    body = api(viewer).get(f"/api/trials/{output_of(search)}/output").json()
    assert body["reason"].startswith("Ray's dashboard is not reachable: no Ray cluster configured")

    settings.RAY_API_SERVER_ADDRESS = f"http://127.0.0.1:{free_port()}"  # nothing there
    body = api(viewer).get(f"/api/trials/{output_of(search)}/output").json()
    trial = Trial.objects.get(pk=output_of(search))
    assert (f"Ray lists no {trial.trainable or 'trial'} actor with pid 4321 on 10.0.0.9"
            in body["reason"]), body["reason"]
    Node.objects.create(node_id="ab" * 28, node_ip="10.0.0.9", state="ALIVE", last_seen_at=NOW)
    # The pid a result line names is another job's actor there: its output is not shown
    # (issue 43, M6), and nothing is asked of Ray.
    Actor.objects.create(actor_id="other", pid=4321, node_id="ab" * 28, state="ALIVE",
                         repr_name="SomeoneElsesWorker", class_name="SomeoneElsesWorker",
                         job_id="09000000", first_seen_at=NOW, updated_at=NOW)
    body = api(viewer).get(f"/api/trials/{output_of(search)}/output").json()
    assert body["stdout"] is None and "that runs this trial alone" in body["reason"]
    assert body["source"] == "" and body["actor_id"] is None
    Actor.objects.filter(actor_id="other").update(repr_name=trial.trainable or "T",
                                                  class_name=trial.trainable or "T")
    Trial.objects.filter(pk=trial.pk).update(trainable=trial.trainable or "T")
    body = api(viewer).get(f"/api/trials/{output_of(search)}/output").json()
    assert body["stdout"] is None and body["stderr"] is None
    assert body["reason"].startswith("stdout: Ray's dashboard: cannot reach http://127.0.0.1:")
    assert body["source"] == "Ray's log API, actor other"

    assert api(viewer).get(f"/api/trials/{output_of(search)}/output?lines=0").status_code == 400
    assert api(viewer).get(f"/api/trials/{output_of(search)}/output?lines=x").status_code == 400
    assert api(viewer).get("/api/trials/999999/output").status_code == 404
