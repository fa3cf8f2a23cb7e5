"""A Ray Train V2 run shows as a run, with its status, ranks and the call its hang waits
in: a real TorchTrainer of two gloo workers on CPU (tests/train_scripts/gloo_run.py), as
Ray ships it but for state tracking on in its driver's environment, until rank 1 waits
in torch.distributed.barrier() while rank 0 waits in ray.train.report's own barrier.
raywatch lists the run once (framework "raytrain", its steps and metrics read from its
ranks' own Ray Train logs by the node's agent), RUNNING as Train's state API says, its
process rank 0's, its workers' pids Ray's; and the hang shows as Ray's call that runs on:
rank 0's SynchronizationActor.broadcast_from_rank_zero, in the run's job (the training
functions themselves run in threads: no worker call runs). The same with tracking off
(make demo's Ray Train run): its rank that stalls outside the collective is named.

And, pure or against stored rows: Train's state API reply and its "not tracked" answer,
its runs mirrored, a run's page following its ranks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from collectors.hostinfo import host_name
from collectors.http import SourceError
from collectors.raystate import fetch_json
from collectors.raytrain import NOT_TRACKED, TrainListing, fetch_train_runs, parse_train_runs
from collectors.records import RAYTRAIN
from collectors.runformats import train_run_dir
from dashboard.agents import tokens
from dashboard.celery import app as celery_app
from dashboard.cluster.endpoint import ray_endpoint
from dashboard.cluster.models import Actor, Cluster, Node, RayCall, TrainRun, settings_cluster_pk
from dashboard.cluster.trainruns import (
    TRAIN_EVERY_S,
    ingest_train_runs,
    train_due,
)
from dashboard.core.scheduler import EmbeddedScheduler
from dashboard.incidents.models import Incident
from dashboard.trials.models import RunRank, StepResult, Trial, TrialStack
from dashboard.trials.runs import runs_by_job
from dashboard.trials.views_data import experiments_payload, train_run_payload
from tests.agents import agent_env, running_agent
from tests.conftest import stop_node, wait_for
from tests.patience import patient

ROOT = Path(__file__).resolve().parent.parent
NAME = "gloo-demo"
HANG_AT = 4  # steps 1-3 are reported, then the ranks wait on each other
SYNC_CALL = "SynchronizationActor.broadcast_from_rank_zero"


def bound_to_rank_0(trial: Trial | None) -> Trial | None:
    """The run once its process is rank 0's as Train's state API lists it (asked less
    often than Ray's other lists)."""
    listed = TrainRun.objects.filter(name=NAME).first()
    rank_0 = next((w["pid"] for w in listed.workers if w.get("rank") == 0), None) \
        if listed is not None else None
    return trial if trial is not None and rank_0 and trial.pid == rank_0 else None


def start_train(cluster, storage: Path) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.train_scripts.gloo_run", cluster.gcs_address,
         str(storage), NAME, str(HANG_AT)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "RAY_AUTH_MODE": "token"}, start_new_session=True)


@contextmanager
def watched(settings, cluster, tmp_path: Path, url: str) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """raywatch's Ray and log polls in this process, and this host's agent as `serve`
    starts it: it reads the ranks' own Ray Train logs and takes their stacks."""
    scheduler = EmbeddedScheduler(celery_app, {
        name: settings.CELERY_BEAT_SCHEDULE[name]
        for name in ("poll-ray-state", "poll-trial-logs")})
    scheduler.start()
    node_ip = cluster.gcs_address.rpartition(":")[0]
    token = tokens.issue(host_name(), None, timezone.now(), node_ip)[1]
    try:
        with running_agent(agent_env(url, token, tmp_path, host_name(), node_ip, gpus=0,
                                     RAYWATCH_RAY_TMP_DIR=str(
                                         Path(cluster.session_dir).parent)),
                           tmp_path / "agent.log"):
            yield
    finally:
        scheduler.stop()


@pytest.mark.ray
@pytest.mark.beside
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_a_hung_train_run_is_listed_with_its_ranks_and_the_call_it_waits_in(  # type: ignore[no-untyped-def]
        settings, ray_settings, tmp_path, client, viewer, live_server_asgi) -> None:
    settings.LOG_DIRS = []
    settings.EMBEDDED = True  # stacks are taken in this process's background pool
    settings.AGENT_STALE_S = patient(8.0)  # > the 5 s between last_seen_at writes
    # Ray's real answer, whatever this session's cluster ran before: runs, or "not
    # tracked" (HTTP 500 until a tracked run starts); never taken for a failure.
    assert fetch_train_runs(lambda p: fetch_json(ray_endpoint(None), p)).problem is None
    started = time.monotonic()
    run = start_train(ray_settings, tmp_path / "storage")
    watching = watched(settings, ray_settings, tmp_path, live_server_asgi.url)
    watching.__enter__()
    try:
        trial = wait_for(lambda: bound_to_rank_0(Trial.objects.filter(
            framework=RAYTRAIN, iteration__gte=HANG_AT - 1, status=Trial.RUNNING,
            pid__isnull=False, process_alive=True, trial_id=NAME).first()), 150, 0.5,
            "the run's steps before the hang, RUNNING with rank 0's process, seen alive",
            explain=lambda: (list(Trial.objects.values("trial_id", "framework", "status",
                                                       "iteration", "pid")),
                             list(TrainRun.objects.values("name", "status", "workers"))))
        listed = TrainRun.objects.get(name=NAME)
        assert listed.status == "RUNNING" and listed.attempts == 1
        ranks = {w["rank"]: w for w in listed.workers}
        workers = Actor.objects.filter(class_name="RayTrainWorker", state="ALIVE",
                                       job_id=listed.job_id)
        assert sorted(ranks) == [0, 1]
        assert {w["pid"] for w in ranks.values()} == set(workers.values_list("pid", flat=True))
        assert all(w["gpu_ids"] == [] for w in ranks.values())  # a CPU run: no GPU given
        node = Node.objects.get(node_id=ranks[0]["node_id"])
        assert trial.experiment.name == f"job {listed.job_id}"
        # One run: the ranks' logs and Train's listing are two sources of it, not two runs.
        assert Trial.objects.filter(framework=RAYTRAIN).count() == 1
        assert (trial.pid, trial.node_ip, trial.hostname) == (ranks[0]["pid"], node.node_ip,
                                                               node.hostname)
        assert trial.process_alive is True and trial.status_reason == "its actor is alive"
        # The run's page lists its ranks, as Train's state API does.
        client.force_login(viewer)
        page = client.get(f"/trials/{trial.pk}/").content.decode()
        shown = json.loads(re.search(r'id="trial-initial"[^>]*>(.*?)</script>', page,
                                     re.S)[1])["train"]
        assert "Ray Train workers" in page and shown["status"] == "RUNNING"
        assert [(w["rank"], w["pid"]) for w in shown["workers"]] == [
            (0, ranks[0]["pid"]), (1, ranks[1]["pid"])]
        [experiment] = [e for e in experiments_payload()
                        if e["name"] == f"job {listed.job_id}"]
        assert experiment["frameworks"] == [RAYTRAIN]
        steps = list(StepResult.objects.filter(trial=trial).order_by("iteration"))
        assert [s.iteration for s in steps] == [1, 2, 3] and steps[0].attempt == 1
        assert [s.metrics["loss"] for s in steps] == [1.0, 0.5, pytest.approx(1 / 3)]
        assert steps[2].metrics["sum"] == 6.0 and steps[2].at is not None
        # The hang: rank 0 waits in ray.train.report's barrier, a Ray call that runs on in
        # the run's job; the training functions run in threads of their workers, so no
        # call of theirs runs (Train's health checks answer all along).
        waiting = wait_for(lambda: RayCall.objects.filter(
            name=SYNC_CALL, job_id=listed.job_id,
            first_seen_at__lte=timezone.now() - timedelta(seconds=5)).first(), 30, 0.5,
            "rank 0's wait in Ray Train's barrier, running on",
            explain=lambda: list(RayCall.objects.values_list("name", "first_seen_at")))
        assert not RayCall.objects.filter(name__startswith="RayTrainWorker.").exists()
        assert RayCall.objects.filter(name="TrainController.run").exists()
        assert TrainRun.objects.get(name=NAME).status == "RUNNING"
        # The call's job is the run's: an overdue call there would be the run's incident.
        assert runs_by_job({(waiting.cluster_id, waiting.job_id)}) == {
            (waiting.cluster_id, waiting.job_id): trial}
        took = time.monotonic() - started
        print(f"run listed, hung and its waiting call seen {took:.0f} s after its driver started")
        # Caught by its silence, from its stacks, with the shipped thresholds: rank 0's
        # training thread (not its worker's idle main thread) hung in the user's loop,
        # waiting in ray.train.report's barrier (a ray.get).
        stalled = wait_for(lambda: Incident.objects.filter(
            kind="trial_stalled", trial=trial, state="firing").first(), 120, 0.5,
            "the hung run's stall", explain=lambda: (
                list(TrialStack.objects.values("state", "verdict", "reason")),
                (tmp_path / "agent.log").read_text()[-1500:]))
        trial.refresh_from_db()
        silent = (stalled.opened_at - trial.last_result_at).total_seconds()
        assert silent <= 60 and stalled.details["hung"] is True, (
            silent, stalled.details, list(TrialStack.objects.values("state", "reason")))
        assert Incident.objects.filter(trial=trial).count() == 1  # one hang, one incident
        # Both ranks' stacks, Train's ranks: each waits for the other, in a different
        # collective (rank 1 in torch's barrier, rank 0 in Ray Train's report).
        verdict = stalled.details["verdict"]
        assert verdict.startswith("all 2 ranks sampled of 2 wait in a collective: "), verdict
        assert "rank 0 waits in " in verdict and "rank 1 waits in barrier (" in verdict
        assert "hung in train_loop (tests/train_scripts/gloo_run.py:" in verdict
        assert "waiting on ray.get on another call" in verdict
    finally:
        watching.__exit__(None, None, None)
        stop_node(run)


@pytest.mark.ray
@pytest.mark.beside
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_an_untracked_train_run_whose_rank_stalls_outside_the_collective_names_it(  # type: ignore[no-untyped-def]
        settings, ray_settings, tmp_path, live_server_asgi, client, viewer) -> None:
    """A TorchTrainer as Ray ships it (no state tracking, no raywatch callback, nothing
    configured): the run is read from Ray Train's own logs of its ranks by the node's
    agent, and when rank 1's data loader never yields while rank 0 waits in all_reduce,
    the stall names rank 1 and where it waits, within a minute of the hang."""
    name = "gloo-loader"
    settings.EMBEDDED = True  # stacks are taken in this process's background pool
    settings.AGENT_STALE_S = patient(8.0)
    settings.LOG_DIRS = []
    run = subprocess.Popen(  # make demo's Ray Train run, its rank 1 stalling at HANG_AT
        [sys.executable, "-m", "demo.train", ray_settings.gcs_address, name, str(HANG_AT),
         str(tmp_path / "storage")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "RAY_AUTH_MODE": "token"}, start_new_session=True)
    watching = watched(settings, ray_settings, tmp_path, live_server_asgi.url)
    watching.__enter__()
    try:
        trial = wait_for(lambda: Trial.objects.filter(
            framework=RAYTRAIN, trial_id=name, iteration__gte=HANG_AT - 1,
            pid__isnull=False, status=Trial.RUNNING).first(), 150, 0.5,
            "the run's steps before the hang, from Ray Train's own logs, bound to rank 0",
            explain=lambda: (list(Trial.objects.values("trial_id", "framework", "status",
                                                       "iteration", "pid")),
                             list(RunRank.objects.values()),
                             (tmp_path / "agent.log").read_text()[-1500:]))
        job = trial.experiment.name.removeprefix("job ")
        workers = dict(Actor.objects.filter(class_name="RayTrainWorker", state="ALIVE",
                                            job_id=job).values_list("pid", "node_id"))
        ranks = {r.rank: r for r in RunRank.objects.filter(trial=trial)}
        assert sorted(ranks) == [0, 1] and {r.pid for r in ranks.values()} == set(workers)
        assert trial.pid == ranks[0].pid and ranks[0].world_size == 2
        assert not TrainRun.objects.filter(name=name).exists()  # untracked: Train lists none
        steps = list(StepResult.objects.filter(trial=trial).order_by("iteration"))
        assert [s.iteration for s in steps] == [1, 2, 3]
        assert [s.metrics["loss"] for s in steps] == [1.0, 0.5, pytest.approx(1 / 3)]
        assert steps[2].metrics["tokens"] == 6.0 and steps[2].at is not None
        assert ranks[1].step == HANG_AT - 1
        # The run's page lists its ranks as their logs said, with how far each reported.
        client.force_login(viewer)
        page = client.get(f"/trials/{trial.pk}/").content.decode()
        shown = json.loads(re.search(r'id="trial-initial"[^>]*>(.*?)</script>', page,
                                     re.S)[1])["train"]
        assert (shown["source"], shown["world_size"]) == ("logs", 2)
        assert [(w["rank"], w["pid"], w["step"]) for w in shown["workers"]] == [
            (0, ranks[0].pid, HANG_AT - 1), (1, ranks[1].pid, HANG_AT - 1)]
        stalled = wait_for(lambda: Incident.objects.filter(
            kind="trial_stalled", trial=trial, state="firing").first(), 120, 0.5,
            "the hung run's stall", explain=lambda: (
                list(TrialStack.objects.values("state", "verdict", "reason")),
                (tmp_path / "agent.log").read_text()[-1500:]))
        trial.refresh_from_db()
        silent = (stalled.opened_at - trial.last_result_at).total_seconds()
        verdict = stalled.details["verdict"]
        assert silent <= 60 and stalled.details["hung"] is True, (silent, stalled.details)
        assert verdict.startswith("rank 1 of 2 not in the collective: rank 1 waits in "), \
            verdict
        assert "waits in Queue.get (queue.py:" in verdict, verdict
        assert "from next_batch (demo/train.py:" in verdict, verdict
        assert "rank 0 waits in all_reduce (" in verdict, verdict
        assert "(rank 1: hung in next_batch (" in verdict and "waiting on a queue" in verdict
        assert "rank 1 of 2" in stalled.summary, stalled.summary
        stack = TrialStack.objects.filter(trial=trial).order_by("-requested_at").first()
        assert f"--- rank 1 (pid {ranks[1].pid} on " in stack.text
    finally:
        watching.__exit__(None, None, None)
        stop_node(run)


# --- pure, and against stored rows ----------------------------------------------------------
TRAIN_REPLY = {"train_runs": [{
    "id": "f47a", "name": "gloo-demo", "job_id": "03000000", "controller_actor_id": "c932",
    "status": "RUNNING", "status_detail": None, "start_time_ns": 1795747825588434758,
    "end_time_ns": None, "attempts": [
        {"attempt_id": "a1", "status": "ERRORED", "workers": [{"world_rank": 0, "pid": 1}]},
        {"attempt_id": "a2", "status": "RUNNING", "workers": [
            {"world_rank": 1, "local_rank": 1, "actor_id": "81ac", "node_id": "7974",
             "node_ip": "192.0.2.2", "pid": 32666, "gpu_ids": [1], "status": "ALIVE"},
            {"world_rank": 0, "local_rank": 0, "actor_id": "017b", "node_id": "7974",
             "node_ip": "192.0.2.2", "pid": 32641, "gpu_ids": ["0"], "status": "ALIVE"}]}]},
    {"name": "no id"}, "garbage"]}


def test_the_state_apis_runs_and_its_answer_while_it_keeps_none() -> None:
    [run] = parse_train_runs(TrainListing(reply=TRAIN_REPLY))
    assert (run.run_id, run.name, run.status, run.job_id, run.attempts) == (
        "f47a", "gloo-demo", "RUNNING", "03000000", 2)
    assert [(w.rank, w.pid, w.gpu_ids, w.state) for w in run.workers] == [
        (0, 32641, (0,), "ALIVE"), (1, 32666, (1,), "ALIVE")]  # the latest attempt's
    assert run.started_at is not None and run.started_at.year == 2026 and run.ended_at is None

    def answers(status: int, body: str):  # type: ignore[no-untyped-def]
        def fetch(path: str) -> dict:
            raise SourceError(f"HTTP {status}", status=status, body=body)
        return fetch_train_runs(fetch)
    # Ray's words (dashboard/modules/train/train_head.py) while no state actor exists
    off = answers(500, NOT_TRACKED + ". Please make sure Ray Train is running and that ...")
    assert (off.tracked, off.problem, parse_train_runs(off)) == (False, None, [])
    assert answers(404, "no route").problem is None
    assert answers(503, "The GCS may be down").problem == "HTTP 503"


@pytest.mark.both_backends
@pytest.mark.django_db
def test_the_runs_train_lists_are_mirrored_and_kept_through_a_failed_listing() -> None:
    """Tracking on, Train's runs are mirrored (tracking off, nothing is said: the runs are
    read from their ranks' own logs all the same)."""
    now = timezone.now()
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    Actor.objects.create(cluster=cluster, actor_id="c932", state="ALIVE", pid=7,
                         class_name="TrainController", first_seen_at=now, updated_at=now)
    assert ingest_train_runs(TrainListing(tracked=False), now, cluster) == []
    assert ingest_train_runs(TrainListing(reply=TRAIN_REPLY), now, cluster) == []
    row = TrainRun.objects.get(run_id="f47a")
    assert (row.status, row.attempts, [w["pid"] for w in row.workers]) == (
        "RUNNING", 2, [32641, 32666])
    # A failed listing leaves the rows and says why; a run Ray no longer lists goes.
    assert ingest_train_runs(TrainListing(problem="HTTP 503"), now, cluster) == [
        "Ray Train's state API: HTTP 503"]
    assert TrainRun.objects.filter(run_id="f47a").exists()
    # It is asked every TRAIN_EVERY_S, not every Ray poll (its cost grows with the
    # cluster's history): a poll that did not ask keeps the rows and says it again.
    assert train_due("c", now) and not train_due("c", now + timedelta(seconds=5))
    assert train_due("c", now + timedelta(seconds=TRAIN_EVERY_S))
    assert ingest_train_runs(TrainListing(skipped=True), now, cluster) == [
        "Ray Train's state API: HTTP 503"]
    assert TrainRun.objects.filter(run_id="f47a").exists()
    ingest_train_runs(TrainListing(reply={"train_runs": []}), now, cluster)
    assert not TrainRun.objects.exists()


@pytest.mark.both_backends
@pytest.mark.django_db(transaction=True)
def test_a_train_runs_page_follows_its_ranks_as_train_lists_them(  # type: ignore[no-untyped-def]
        live_server_asgi, viewer) -> None:
    """A restart's new attempt brings new rank processes: the open run page shows them
    without a reload."""
    from dashboard.trials.models import Experiment
    from tests.test_agent_trial_logs import open_trial_page

    now = timezone.now()
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    experiment = Experiment.objects.create(name="job 03000000", cluster=cluster,
                                           kind=Experiment.CONSOLE,
                                           paths=["gpu-a:/tmp/ray/s/logs/train"])
    run = Trial.objects.create(experiment=experiment, trial_id=train_run_dir("gloo-demo"),
                               framework=RAYTRAIN)
    ingest_train_runs(TrainListing(reply=TRAIN_REPLY), now, cluster)
    # A run of the same name in another job is another run: Train's listing is not its.
    other = Trial.objects.create(experiment=Experiment.objects.create(
        name="job 04000000", cluster=cluster, kind=Experiment.CONSOLE, paths=[]),
        trial_id=train_run_dir("gloo-demo"), framework=RAYTRAIN)
    assert train_run_payload(other) is None and train_run_payload(run)["run_id"] == "f47a"

    def shown(page) -> dict:  # type: ignore[no-untyped-def]
        while True:
            message = json.loads(page.recv(timeout=15))
            if message["topic"] == "train":
                return message["data"]

    with open_trial_page(live_server_asgi, viewer, run.pk) as page:
        first = shown(page)
        assert (first["attempts"], [w["pid"] for w in first["workers"]]) == (2, [32641, 32666])
        attempt = {"attempt_id": "a3", "status": "RUNNING", "workers": [
            {"world_rank": r, "pid": 40000 + r, "node_id": "7974", "status": "ALIVE"}
            for r in (0, 1)]}
        [listed] = [r for r in TRAIN_REPLY["train_runs"] if isinstance(r, dict) and "id" in r]
        restarted = {"train_runs": [{**listed, "attempts": [*listed["attempts"], attempt]}]}
        ingest_train_runs(TrainListing(reply=restarted), now + timedelta(seconds=10), cluster)
        pushed = shown(page)
        assert (pushed["attempts"], [w["pid"] for w in pushed["workers"]]) == (
            3, [40000, 40001])
