"""An RL run read from its own log has a process and a status from Ray: an EasyR1-shaped
run on a real Ray cluster (demo/grpo.py: a `Runner` actor driving the steps, logging to
experiment_log.jsonl with EasyR1's file logger on) is tied to its Runner actor on the
node its log was read on, is RUNNING while that actor lives, with the actor's pid and
node; once the run ends, its status is no longer RUNNING and its process is gone. And
the pure rule: two live trainers of one framework on one node are not told apart."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.celery import app as celery_app
from dashboard.cluster.models import (
    Actor,
    CallTiming,
    Cluster,
    ClusterSession,
    Job,
    Node,
    RayCall,
    settings_cluster_pk,
)
from dashboard.core.scheduler import EmbeddedScheduler
from dashboard.gpus.owners import owners_on_hosts
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, StepResult, Trial
from dashboard.trials.runs import bind, runs_by_job
from tests.conftest import mark_ray_current, stop_node, wait_for
from tests.patience import patient
from tests.test_ray_calls import ROOT, start_run

pytestmark = pytest.mark.both_backends


@pytest.mark.ray
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_an_easyr1_run_follows_its_runner_actor(settings, ray_settings, tmp_path  # type: ignore[no-untyped-def]
                                                ) -> None:
    """An EasyR1-shaped run whose file logger writes where EasyR1's does by default, under
    its trainer's working directory (`checkpoints/...`, relative: EasyR1 opens the file
    for each line, so no process holds it open): that is what ties the run to its Runner
    actor (issue 43, M2: not being the node's only trainer)."""
    # A worker's working directory on this cluster (its raylet's, for a driver that
    # joins it): the run's checkpoints go under it, as a relative path would put them.
    checkpoints = Path(worker_cwd(ray_settings)) / ".raywatch-test-runs" / tmp_path.name
    settings.CENTRAL_LOGS, settings.LOG_DIRS = True, [str(checkpoints)]
    scheduler = EmbeddedScheduler(celery_app, {
        name: settings.CELERY_BEAT_SCHEDULE[name]
        for name in ("poll-ray-state", "poll-trial-logs")})
    scheduler.start()
    # Healthy, six steps, its file log where EasyR1 writes it by default: under the
    # trainer's working directory (its driver's), the evidence that ties the run to it.
    run = start_run(ray_settings, 6, 0, checkpoints / "grpo")
    try:
        trial = wait_for(lambda: Trial.objects.exclude(experiment__kind=Experiment.CONSOLE)
                         .filter(framework="easyr1", status=Trial.RUNNING).first(), 120, 0.5,
            "the run to be RUNNING, tied to its Runner actor",
            explain=lambda: list(Trial.objects.values("trial_id", "framework", "status",
                                                      "status_reason", "pid", "node_ip")))
        runner = Actor.objects.get(class_name="Runner", state="ALIVE")
        node = Node.objects.get(node_id=runner.node_id)
        assert (trial.pid, trial.node_ip, trial.hostname) == (runner.pid, node.node_ip,
                                                               node.hostname)
        assert trial.process_alive is True and trial.status_reason == "its actor is alive"
        # The run's steps ended: its Runner and driver are gone, so is RUNNING.
        run.wait(patient(120))
        ended = wait_for(lambda: (t := Trial.objects.get(pk=trial.pk)).status
                         != Trial.RUNNING and t, 60, 0.5, "the ended run to leave RUNNING")
        assert ended.process_alive is False, ended.status_reason
        assert ended.iteration == 6
    finally:
        scheduler.stop()
        stop_node(run)
        shutil.rmtree(checkpoints.parent, ignore_errors=True)


def worker_cwd(cluster) -> str:  # type: ignore[no-untyped-def]
    """The working directory of a Ray worker of `cluster`, as a driver that joins it sees."""
    script = ("import os, sys, ray\nray.init(address=sys.argv[1], logging_level='ERROR')\n"
              "@ray.remote(num_cpus=0)\ndef cwd():\n    return os.getcwd()\n"
              "print(ray.get(cwd.remote()))\n")
    done = subprocess.run([sys.executable, "-c", script, cluster.gcs_address], check=True,
                          capture_output=True, text=True, timeout=patient(60),
                          env={**os.environ, "RAY_AUTH_MODE": "token"})
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.django_db
def test_two_live_trainers_on_one_node_are_told_apart_only_by_the_logs_writer() -> None:
    now = timezone.now()
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    experiment = Experiment.objects.create(name="verl_demo", cluster=cluster,
                                           paths=["/data/verl_demo"])
    run = Trial(experiment=experiment, trial_id="exp1", framework="verl", attempt=1)
    node = Node(cluster=cluster, node_id="n1", node_ip="10.0.0.5", hostname="gpu-5",
                state=Node.ALIVE, last_seen_at=now)
    actors = [Actor(cluster=cluster, actor_id=f"a{i}", class_name="TaskRunner", pid=100 + i,
                    node_id="n1", state="ALIVE", first_seen_at=now, updated_at=now)
              for i in range(2)]
    run.node_ip = "10.0.0.5"
    bind(run, {(cluster.pk, "10.0.0.5"): actors}, {(cluster.pk, "n1"): node})
    assert run.pid is None  # two TaskRunners there: which writes this run's log is unknown
    run.writer_pid = 101  # its node's reader found which holds the run's log open
    bind(run, {(cluster.pk, "10.0.0.5"): actors}, {(cluster.pk, "n1"): node})
    assert (run.pid, run.hostname) == (101, "gpu-5")
    run.pid, run.writer_pid = None, 999  # a pid no trainer there has: still not told apart
    bind(run, {(cluster.pk, "10.0.0.5"): actors}, {(cluster.pk, "n1"): node})
    assert run.pid is None
    # The node's only trainer is not the run's for being the only one (issue 43, M2): a
    # job can write a verl-shaped file anywhere under a log root.
    run.writer_pid = None
    bind(run, {(cluster.pk, "10.0.0.5"): actors[:1]}, {(cluster.pk, "n1"): node})
    assert run.pid is None
    run.writer_pid = 100
    bind(run, {(cluster.pk, "10.0.0.5"): actors[:1]}, {(cluster.pk, "n1"): node})
    assert (run.pid, run.hostname) == (100, "gpu-5")
    # An EasyR1 Runner is no verl run's trainer.
    other = Trial(experiment=experiment, trial_id="exp2", framework="verl", attempt=1,
                  node_ip="10.0.0.5")
    runner = Actor(cluster=cluster, actor_id="r", class_name="Runner", pid=300, node_id="n1",
                   state="ALIVE", first_seen_at=now, updated_at=now)
    bind(other, {(cluster.pk, "10.0.0.5"): [runner]}, {(cluster.pk, "n1"): node})
    assert other.pid is None



def stored_verl_run(now, job: str = "01000000"):  # type: ignore[no-untyped-def]
    """A verl run tied to its TaskRunner (pid 100, job 01000000) on node n1 (10.0.0.5),
    as the Ray poll and the trial poll store them, in the shared cluster, without what
    earlier tests' real clusters left in its rows (gone for the test, rolled back after
    it). A session that ended there after the run's last result makes the run that
    session's history, never evaluated again (trials/detect.of_ended_session): in a full
    run a real head restarted under the shared cluster's name in the last 90 s, and a run
    silent for 90 s was never called stalled."""
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    ClusterSession.objects.filter(cluster=cluster).delete()
    Incident.objects.filter(kind="call_overdue", cluster=cluster).delete()
    RayCall.objects.filter(cluster=cluster).delete()
    CallTiming.objects.filter(cluster=cluster).delete()
    experiment = Experiment.objects.create(name="verl_demo", cluster=cluster,
                                           paths=["/data/verl_demo"])
    run = Trial.objects.create(experiment=experiment, trial_id="exp1", framework="verl",
                               attempt=1, pid=100, node_ip="10.0.0.5", status=Trial.RUNNING)
    Node.objects.create(cluster=cluster, node_id="n1", node_ip="10.0.0.5", hostname="gpu-5",
                        state=Node.ALIVE, last_seen_at=now)
    Actor.objects.create(cluster=cluster, actor_id="t", class_name="TaskRunner", pid=100,
                         node_id="n1", job_id=job, state="ALIVE", first_seen_at=now,
                         updated_at=now)
    return cluster, run


@pytest.mark.django_db
def test_a_runs_gpus_are_the_runs() -> None:
    """A GPU held by an actor of the job a run's trainer drives (verl's WorkerDict) is the
    run's: its tile names the run and links its page, and the run's GPUs are watched as a
    trial's (idle during a step). An actor of another job stays an actor."""
    now = timezone.now()
    mark_ray_current()
    cluster, run = stored_verl_run(now)
    for actor_id, cls, pid, job in (("w", "WorkerDict", 200, "01000000"),
                                    ("x", "WorkerDict", 300, "02000000")):
        Actor.objects.create(cluster=cluster, actor_id=actor_id, class_name=cls, pid=pid,
                             node_id="n1", job_id=job, state="ALIVE", first_seen_at=now,
                             updated_at=now)
    owners = owners_on_hosts({"10.0.0.5": {200: [], 300: []}}, now)["10.0.0.5"]
    assert (owners[200].kind, owners[200].trial_id) == ("trial", "exp1")
    assert owners[200].label == "actor WorkerDict of run exp1 (verl_demo)"
    assert owners[200].url == f"/trials/{run.pk}/"
    assert (owners[300].kind, owners[300].trial_id) == ("actor", None)
    assert runs_by_job({(cluster.pk, "01000000"), (cluster.pk, "02000000")}) == {
        (cluster.pk, "01000000"): run}


@pytest.mark.django_db
def test_a_runs_page_stops_its_submitted_job(client, operator, viewer) -> None:  # type: ignore[no-untyped-def]
    """A run whose trainer's job was submitted through Ray's Jobs API has Stop for that
    job on its page (the Jobs page's audited action: it ends every actor of the run), for
    an operator; a run of a driver started by hand, and a viewer, have none."""
    now = timezone.now()
    cluster, run = stored_verl_run(now)
    job = Job.objects.create(cluster=cluster, key="raysubmit_abc", job_id="01000000",
                             submission_id="raysubmit_abc", type="SUBMISSION",
                             status="RUNNING", updated_at=now)
    client.force_login(operator)
    page = client.get(f"/trials/{run.pk}/").content.decode()
    assert "<h1>Run " in page and 'data-stop-job="raysubmit_abc"' in page
    client.force_login(viewer)
    assert "data-stop-job" not in client.get(f"/trials/{run.pk}/").content.decode()
    client.force_login(operator)
    Job.objects.filter(pk=job.pk).update(submission_id="", key="01000000", type="DRIVER")
    assert "data-stop-job" not in client.get(f"/trials/{run.pk}/").content.decode()


@pytest.mark.django_db
def test_a_run_whose_trainer_died_has_no_process_even_while_rays_view_is_stale() -> None:
    """Its trainer listed DEAD and its job ended: the run takes the job's end, and its
    process is gone, though an evaluation made while the cluster's view is not current
    cannot read liveness (an ended run is not looked at for it again: seen in CI)."""
    now = timezone.now()
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    experiment = Experiment.objects.create(name="easyr1_demo", cluster=cluster,
                                           paths=["/data/checkpoints"])
    run = Trial(experiment=experiment, trial_id="grpo", framework="easyr1", attempt=1,
                pid=100, node_ip="10.0.0.5", process_alive=True, status=Trial.RUNNING)
    node = Node(cluster=cluster, node_id="n1", node_ip="10.0.0.5", hostname="gpu-5",
                state=Node.ALIVE, last_seen_at=now)
    runner = Actor(cluster=cluster, actor_id="r", class_name="Runner", pid=100, node_id="n1",
                   job_id="02000000", state="DEAD", ended_at=now, first_seen_at=now,
                   updated_at=now)
    Job.objects.create(cluster=cluster, key="02000000", job_id="02000000", type="DRIVER",
                       status="SUCCEEDED", updated_at=now)
    bind(run, {(cluster.pk, "10.0.0.5"): [runner]}, {(cluster.pk, "n1"): node})
    assert (run.tune_status, run.process_alive, run.process_gone_since) == (
        "TERMINATED", False, now)


@pytest.mark.django_db
@pytest.mark.parametrize("own_writer", [None, 201])
def test_a_run_is_not_tied_to_the_trainer_writing_another_runs_log(
        own_writer: int | None) -> None:
    """Two verl runs on one node, and Ray lists only the first one's TaskRunner yet (seen
    in CI: the second was tied to it for a while). The second run, whose writer is not
    known yet or is another process, waits for its own; the first is tied to its own."""
    now = timezone.now()
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    node = Node.objects.create(cluster=cluster, node_id="n1", node_ip="10.0.0.5",
                               hostname="gpu-5", state=Node.ALIVE, last_seen_at=now)
    first, second = (
        Trial.objects.create(experiment=Experiment.objects.create(
            name=f"verl_{n}", cluster=cluster, paths=["/data/verl"]), trial_id=f"exp{n}",
            framework="verl", attempt=1, node_ip="10.0.0.5", status=Trial.RUNNING,
            writer_pid=writer) for n, writer in ((0, 200), (1, own_writer)))
    trainer = Actor.objects.create(cluster=cluster, actor_id="t0", class_name="TaskRunner",
                                   pid=200, node_id="n1", job_id="02000000", state="ALIVE",
                                   first_seen_at=now, updated_at=now)
    trainers = {(cluster.pk, "10.0.0.5"): [trainer]}
    bind(second, trainers, {(cluster.pk, "n1"): node})
    bind(first, trainers, {(cluster.pk, "n1"): node})
    assert (first.pid, second.pid) == (200, None)


@pytest.mark.ray
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_two_verl_runs_on_one_node_each_follow_the_trainer_that_writes_their_log(  # type: ignore[no-untyped-def]
        settings, ray_settings, tmp_path) -> None:
    """Two `TaskRunner` actors on one node, each writing one run's verl log: the reader
    finds which process holds each file open, and each run is tied to its own."""
    root, pids = tmp_path / "verl", tmp_path / "pids"
    pids.mkdir()
    settings.CENTRAL_LOGS, settings.LOG_DIRS = True, [str(root)]
    scheduler = EmbeddedScheduler(celery_app, {
        name: settings.CELERY_BEAT_SCHEDULE[name]
        for name in ("poll-ray-state", "poll-trial-logs")})
    scheduler.start()
    runs = subprocess.Popen(
        [sys.executable, "-m", "tests.tune_scripts.verl_runs", ray_settings.gcs_address,
         str(root), str(pids), "60"], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env={**os.environ, "RAY_AUTH_MODE": "token"},
        start_new_session=True)
    # The runs read from their file logs (each trainer is also a run of its console,
    # found from Ray, which that file-logged run speaks for).
    logged = Trial.objects.exclude(experiment__kind=Experiment.CONSOLE)
    try:
        bound = wait_for(lambda: dict(logged.filter(
            framework="verl", status=Trial.RUNNING, pid__isnull=False).values_list(
            "trial_id", "pid")) if logged.filter(
            framework="verl", status=Trial.RUNNING, pid__isnull=False).count() == 2 else None,
            120, 0.5, "both verl runs RUNNING, each tied to a TaskRunner",
            explain=lambda: list(Trial.objects.values("trial_id", "framework", "status",
                                                      "pid", "writer_pid")))
        writers = {name: int((pids / name).read_text()) for name in ("exp0", "exp1")}
        assert bound == writers
        assert set(Actor.objects.filter(class_name="TaskRunner", state="ALIVE")
                   .values_list("pid", flat=True)) == set(writers.values())
    finally:
        scheduler.stop()
        stop_node(runs)


@pytest.mark.django_db
def test_a_run_whose_trainer_died_after_the_live_view_was_read_is_not_called_alive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation reads Ray's live processes first and the trainer actors later; a Ray
    poll that stored the trainer's death in between (a loaded machine) made an ended run
    TERMINATED "as Tune's experiment state reports" with its process still alive, until
    the next evaluation. The trainer's death is the newer news: the run's process is gone."""
    from dashboard.trials import detect

    now = timezone.now()
    mark_ray_current()
    cluster, run = stored_verl_run(now)
    Actor.objects.filter(actor_id="t").update(state="DEAD", updated_at=now)
    Job.objects.create(cluster=cluster, key="01000000", job_id="01000000", type="DRIVER",
                       status="SUCCEEDED", updated_at=now)
    stale = detect.live_processes(now)
    stale[cluster.pk][("10.0.0.5", 100)] = 0.0  # read while the trainer still lived
    monkeypatch.setattr(detect, "live_processes", lambda now: stale)
    detect.evaluate_trials(now)
    run.refresh_from_db()
    assert (run.status, run.process_alive) == (Trial.TERMINATED, False), run.status_reason


@pytest.mark.django_db
def test_a_run_waiting_on_a_call_in_its_limit_is_the_calls_to_judge(settings) -> None:  # type: ignore[no-untyped-def]
    """A GRPO step's reward call hangs: the run fell silent at its last step, before the
    call began, so its stall limit came first and trial_stalled opened, to be resolved a
    few seconds later when call_overdue named the same hang (tests/test_ray_calls.py, on a
    loaded machine). While its trainer's job runs a call with a usual duration, the run's
    silence is that call's to judge; once no such call runs, the run is stalled again."""
    from dashboard.trials import detect

    settings.STALL_MIN_S = 60
    now = timezone.now()
    mark_ray_current()
    # A job of its own, which no real cluster of this run reaches: a Ray poll that
    # commits while this test runs cannot put a call in it.
    job = "7e000000"
    cluster, run = stored_verl_run(now, job)
    Trial.objects.filter(pk=run.pk).update(iteration=4,
                                           last_result_at=now - timedelta(seconds=90))

    def call(name: str, task_id: str, pid: int = 200) -> RayCall:
        return RayCall.objects.create(cluster=cluster, task_id=task_id, name=name,
                                      kind="ACTOR_TASK", job_id=job, actor_id="r",
                                      node_id="n1", pid=pid,
                                      first_seen_at=now - timedelta(seconds=20))

    def stalled() -> bool:
        detect.evaluate_trials(timezone.now())
        return Incident.objects.filter(kind="trial_stalled", state=Incident.FIRING).exists()

    # The trainer's Runner.run-like call (in its own process), never seen to end, is
    # nothing to wait on...
    call("TaskRunner.run", "t1", pid=run.pid)
    # ...the reward call of the step in progress, usually 3 s, 20 s in, is.
    reward = call("AutoRewardManager.compute_reward", "t2")
    CallTiming.objects.create(cluster=cluster, job_id=job, name=reward.name,
                              durations=[3.0, 3.1, 2.9], updated_at=now)
    # Another job's call with a usual duration does not hold this run.
    RayCall.objects.create(cluster=cluster, task_id="t3", name="Other.step", job_id="02000000",
                           first_seen_at=now)
    CallTiming.objects.create(cluster=cluster, job_id="02000000", name="Other.step",
                              durations=[1.0, 1.0], updated_at=now)
    assert not stalled()
    run.refresh_from_db()
    assert run.check_at is not None  # looked at, and again at each poll while it waits
    reward.delete()  # the call ended, and no step came: the run is stalled now
    assert stalled(), (Cluster.objects.values("state").get(pk=cluster.pk),
                       Trial.objects.values("status", "check_at", "last_result_at").get(pk=run.pk),
                       list(RayCall.objects.filter(cluster=cluster).values_list("name", "job_id")),
                       list(CallTiming.objects.filter(cluster=cluster).values_list("name")))


@pytest.mark.django_db(transaction=True)
def test_a_step_waiting_on_a_call_is_one_incident_not_a_slow_step_beside_it(  # type: ignore[no-untyped-def]
        settings) -> None:
    """A run of 5 s steps whose step in progress waits on its reward call: the step has
    run 90 s, far past its slow limit, but whether the call hangs is call_overdue's to
    say (one hang, one incident); no step_time_regression opens beside it. Once the
    call ended and still no step came, the slow step is the run's own to flag (its stall
    waits for its stacks' verdict, which no agent here gives)."""
    from dashboard.trials import detect

    settings.SLOW_FOR_S = 0
    job = "7e000001"
    cluster, run = stored_verl_run(timezone.now(), job)
    mark_ray_current()
    now = timezone.now()
    last = now - timedelta(seconds=90)
    StepResult.objects.bulk_create([
        StepResult(trial=run, iteration=i, at=last - timedelta(seconds=5 * (10 - i)),
                   ingested_at=now, time_this_iter_s=5.0,
                   metrics={"timing_s/gen": 2.0, "timing_s/reward": 3.0})
        for i in range(1, 11)])
    Trial.objects.filter(pk=run.pk).update(iteration=10, last_result_at=last,
                                           process_alive=True)
    reward = RayCall.objects.create(cluster=cluster, task_id="r1", kind="ACTOR_TASK",
                                    name="AutoRewardManager.compute_reward", job_id=job,
                                    actor_id="r", node_id="n1", pid=200,
                                    first_seen_at=now - timedelta(seconds=20))
    CallTiming.objects.create(cluster=cluster, job_id=job, name=reward.name,
                              durations=[3.0, 3.1, 2.9], updated_at=now)

    def firing() -> set[str]:
        detect.evaluate_trials(timezone.now())
        return set(Incident.objects.filter(trial=run, state=Incident.FIRING)
                   .values_list("kind", flat=True))

    assert firing() == set()
    reward.delete()
    assert firing() == {"step_time_regression"}
