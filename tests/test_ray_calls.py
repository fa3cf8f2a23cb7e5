"""A phase of an RL step that hangs is caught while it hangs, from Ray's running calls,
with default settings and nothing configured: an EasyR1-shaped run on a real Ray cluster
(demo/grpo.py: a `Runner` actor whose loop calls a `WorkerDict` and an
`AutoRewardManager` actor, printing each step to its console as EasyR1 ships) whose
reward call sleeps for ever from step 4 opens call_overdue within 60 s of the hang. It
names `AutoRewardManager.compute_reward`, its actor, node and pid, where the step's logs
would blame `adv`; the trainer's own never-ending `Runner.run` and the calls that keep
finishing raise nothing. The node's agent reads the run's console (raywatch's host reads
none): the incident is the run's, whose page lists the call running now. And Ray's list
of running calls, pure: what a reply holds, when it was cut, and what Ray dropped."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from collectors.hostinfo import host_name, node_ip_address
from collectors.localray import LocalCluster
from collectors.pystack import RAY_GET
from collectors.raylists import calls_truncation, dropped_task_events
from collectors.raystate import ClusterReply, parse_calls
from dashboard.agents import tokens
from dashboard.celery import app as celery_app
from dashboard.cluster.calls import dropped_lately
from dashboard.cluster.models import (
    Actor,
    CallStack,
    CallTiming,
    Cluster,
    Node,
    RayCall,
    settings_cluster_pk,
)
from dashboard.core.scheduler import EmbeddedScheduler
from dashboard.gpus.detect import thresholds, with_call_stacks
from dashboard.incidents.models import Incident
from dashboard.incidents.resource_rules import CallView, call_overdue
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.views_data import run_calls_payload, trial_payload
from tests.agents import agent_env, running_agent
from tests.conftest import stop_node, wait_for

pytestmark = pytest.mark.both_backends  # On SQLite too: the call poll and its detector
ROOT = Path(__file__).resolve().parent.parent
PROMISED_S = 60  # issue: within 60 s of the hang, with default settings
HANG_AT = 4
REWARD = "AutoRewardManager.compute_reward"


def start_run(cluster: LocalCluster, steps: int, hang_at: int,
              file_log: Path | None = None) -> subprocess.Popen:
    """demo/grpo.py's EasyR1-shaped run: its console only, as EasyR1 ships, or with its
    file logger too (into `file_log`)."""
    return subprocess.Popen(
        [sys.executable, "-m", "demo.grpo", "easyr1", cluster.gcs_address, str(steps),
         str(hang_at), *([str(file_log)] if file_log else [])],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "RAY_AUTH_MODE": "token"}, start_new_session=True)


@pytest.mark.ray
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_a_hung_reward_call_is_named_within_a_minute(  # type: ignore[no-untyped-def]
        settings, ray_settings, tmp_path, live_server_asgi) -> None:
    settings.EMBEDDED = True  # the stacks are taken by this process's pool, as on make run
    settings.CENTRAL_LOGS = False  # raywatch's host reads no log: the node's agent does
    scheduler = EmbeddedScheduler(celery_app, {  # raywatch's own schedule and defaults
        name: settings.CELERY_BEAT_SCHEDULE[name]
        for name in ("poll-ray-state", "detect-resources", "poll-trial-logs")})
    scheduler.start()
    run = start_run(ray_settings, 40, HANG_AT)
    # This host's agent, as `serve` starts it: it watches the run's Ray workers, takes
    # their stacks and reads the run's console (the trainer's worker log, under the
    # cluster's Ray temp dir as the node's own agent would find it).
    _, token = tokens.issue(host_name(), None, timezone.now())
    agent = running_agent(agent_env(live_server_asgi.url, token, tmp_path, host_name(),
                                    node_ip_address(), gpus=0,
                                    RAYWATCH_RAY_TMP_DIR=str(
                                        Path(ray_settings.session_dir).parent)),
                          tmp_path / "agent.log")
    agent.__enter__()
    try:
        hung = wait_for(lambda: _steps_read() >= HANG_AT - 1 and _reward_call(), 180, 0.5,
                        "the reward call of the step that hangs")
        incident = wait_for(lambda: Incident.objects.filter(
            kind="call_overdue", state=Incident.FIRING).first(), PROMISED_S + 30, 1,
            "call_overdue for the reward call",
            explain=lambda: list(RayCall.objects.values_list("name", "first_seen_at")))
        took = (incident.opened_at - hung.first_seen_at).total_seconds()
        assert took <= PROMISED_S, f"{took:.0f} s after the call began"
        reward = Actor.objects.get(actor_id=hung.actor_id)
        node = Node.objects.get(node_id=hung.node_id)
        assert incident.subject == f"call:{hung.task_id}"
        assert incident.summary.startswith("AutoRewardManager.compute_reward has run"
                                           ), incident.summary
        assert incident.details["actor"] == "AutoRewardManager"
        assert f"pid {reward.pid} on {node.node_ip}" in incident.summary, incident.summary
        assert (incident.details["call"], incident.details["pid"]) == (REWARD, reward.pid)
        # Learned from the steps before: two reward calls of ~3 s (the first one of the
        # job, a warm-up, is not learned).
        assert 1.5 <= incident.details["usual_s"] <= 6, incident.details
        # Only the hung call: not the trainer's Runner.run (never seen to end), nor the
        # WorkerDict calls that keep finishing.
        assert list(Incident.objects.filter(kind="call_overdue").values_list(
            "subject", flat=True)) == [incident.subject]
        assert RayCall.objects.filter(name="Runner.run").exists()
        assert not CallTiming.objects.filter(name="Runner.run").exists()
        # Where it hangs, from stacks the node's agent took a few seconds apart, within
        # the same minute: the reward call's own frame, its thread idle, CPU and GPU idle.
        hung_in = wait_for(lambda: (i := Incident.objects.get(pk=incident.pk)).details.get(
            "hung") is not None and i, PROMISED_S, 1, "the verdict of the call's stacks",
            explain=lambda: (list(CallStack.objects.values()),
                             (tmp_path / "agent.log").read_text()[-1500:]))
        stack = CallStack.objects.get(task_id=hung.task_id)
        verdict_s = (stack.taken_at - hung.first_seen_at).total_seconds()
        assert verdict_s <= PROMISED_S, f"the verdict came {verdict_s:.0f} s after the call began"
        assert hung_in.details["hung"] is True, hung_in.details
        assert "compute_reward (demo/grpo.py:" in hung_in.details["frame"], hung_in.details
        assert hung_in.details["waits_on"] == "a sleep or a native call"
        assert f": hung in {hung_in.details['frame']}" in hung_in.summary, hung_in.summary
        assert "compute_reward" in hung_in.details["stack"]["text"]
        assert stack.samples == 3 and stack.source == f"py-spy by the agent of {host_name()}"
        # The hang is the run's: the GRPO run (found from its Runner actor, its console
        # read by the agent) holds the incident, its health says so, and its page lists
        # the call running now, past its limit. One hang, one incident: no trial_stalled.
        grpo = Trial.objects.get(framework="easyr1", experiment__kind=Experiment.CONSOLE)
        assert grpo.pid == Actor.objects.get(class_name="Runner", state="ALIVE").pid
        wait_for(lambda: Incident.objects.get(pk=incident.pk).trial_id == grpo.pk, 30, 1,
                 "the incident to be the run's",
                 explain=lambda: Incident.objects.values("trial_id", "experiment").get(
                     pk=incident.pk))
        assert trial_payload(grpo)["health_all"] == ["call overdue"]
        [now] = [c for c in run_calls_payload(grpo) if c["name"] == REWARD]
        assert now["task_id"] == hung.task_id and now["pid"] == reward.pid
        assert now["overdue_after_s"] is not None
        assert timezone.now() - timedelta(seconds=now["overdue_after_s"]) >= hung.first_seen_at
        assert {c["name"] for c in run_calls_payload(grpo)} >= {"Runner.run", REWARD}
        assert not Incident.objects.filter(kind="trial_stalled").exists()
    finally:
        agent.__exit__(None, None, None)
        scheduler.stop()
        stop_node(run)


def _steps_read() -> int:
    """The training steps of the run that raywatch read from its console."""
    run = Trial.objects.filter(framework="easyr1").first()
    return run.iteration or 0 if run is not None else 0


def _reward_call() -> RayCall | None:
    """The reward call running once the steps before the hang have been learned (the
    job's first, a warm-up, is not)."""
    timing = CallTiming.objects.filter(name=REWARD).first()
    if timing is None or len(timing.durations) < HANG_AT - 2:
        return None
    return RayCall.objects.filter(name=REWARD).first()


def reply(rows: list[dict], total: int | None = None) -> dict:
    body = {"result": rows, "num_after_truncation": len(rows),
            "total": len(rows) if total is None else total, "num_filtered": len(rows)}
    return {"result": True, "msg": "", "data": {"result": body}}


def row(task_id: str, name: str, **extra: object) -> dict:
    return {"task_id": task_id, "attempt_number": 0, "name": name, "state": "RUNNING",
            "type": "ACTOR_TASK", "job_id": "02000000", "actor_id": "ab" * 16,
            "node_id": "cd" * 28, "worker_pid": 4242, **extra}


def test_the_running_calls_in_rays_reply() -> None:
    calls = parse_calls(ClusterReply(nodes={}, status={}, summary={}, actors={}, calls=reply([
        row("t2", "AutoRewardManager.compute_reward"),
        row("t1", "Runner.run", attempt_number=1),
        row("t3", "driver", type="DRIVER_TASK"),  # the driver is no call
        row("t4", "done", state="FINISHED"),
        {"task_id": None}, "garbage"])))
    assert [(c.task_id, c.attempt, c.name, c.pid) for c in calls] == [
        ("t1", 1, "Runner.run", 4242), ("t2", 0, "AutoRewardManager.compute_reward", 4242)]


def test_a_list_is_cut_only_when_full_and_dropped_events_are_said_while_they_grow(
        settings) -> None:  # type: ignore[no-untyped-def]
    many = reply([row(f"t{i}", "f") for i in range(10_000)])
    assert calls_truncation(many) is not None
    # Ray adds every task event it ever dropped to `total`: not a cut of this list.
    few = reply([row("t1", "f")], total=1 + 500)
    assert calls_truncation(few) is None and dropped_task_events(few) == 500
    cluster = Cluster(pk=987654, name="c")
    now = timezone.now()
    assert dropped_lately(cluster, few, now) == []  # what was dropped before raywatch looked
    more = reply([row("t1", "f")], total=1 + 800)
    [said] = dropped_lately(cluster, more, now + timedelta(seconds=2))
    assert said.startswith("Ray dropped 300 task events lately (800 since its cluster started")
    assert dropped_lately(cluster, more, now + timedelta(seconds=300)) == [said]
    assert dropped_lately(cluster, more, now + timedelta(seconds=700)) == []


@pytest.mark.django_db
def test_a_call_hung_in_ray_get_names_the_call_it_waits_for(settings) -> None:  # type: ignore[no-untyped-def]
    """A call hung in `ray.get` is followed to what it waits for: of its job's calls
    running now, the one begun after it that has run longest (not one of another job, nor
    one begun before it), with that call's process, age and, once in, its own verdict."""
    now = timezone.now()
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    Node.objects.create(cluster=cluster, node_id="n1", node_ip="10.0.0.5", hostname="gpu-5",
                        state=Node.ALIVE, last_seen_at=now)
    began = now - timedelta(seconds=300)
    for task_id, name, job, pid, after_s in (
            ("runner", "Runner.run", "01", 100, -1000),  # began before: it waits on this one
            ("gen", "WorkerDict.actor_rollout_generate_sequences", "01", 200, 0),
            ("x", "Other.f", "02", 500, 0.5),  # another job's
            ("engine", "vLLMEngine.generate", "01", 300, 1),
            ("later", "WorkerDict.ping", "01", 400, 100)):
        RayCall.objects.create(cluster=cluster, task_id=task_id, name=name, job_id=job,
                               pid=pid, node_id="n1", kind="ACTOR_TASK",
                               first_seen_at=began + timedelta(seconds=after_s))
    for task_id, pid, waits_on, verdict in (
            ("gen", 200, RAY_GET, "hung in generate_sequences (w.py:9), waiting on "
             f"{RAY_GET}: 3 stacks unchanged, CPU 0%, no GPU"),
            ("engine", 300, "a lock or condition", "hung in generate (engine.py:42), "
             "waiting on a lock or condition: 3 stacks unchanged, CPU 0%, no GPU")):
        CallStack.objects.create(cluster=cluster, task_id=task_id, name="", pid=pid,
                                 node_ip="10.0.0.5", requested_at=now, taken_at=now,
                                 state=CallStack.TAKEN, samples=3, hung=True,
                                 waits_on=waits_on, verdict=verdict)
    view = CallView(task_id="gen", name="WorkerDict.actor_rollout_generate_sequences",
                    kind="ACTOR_TASK", running_since=began, usual_s=3.0, job_id="01",
                    node_ip="10.0.0.5", pid=200)
    finding = call_overdue(view, thresholds(), now)
    [shown] = with_call_stacks(cluster.pk, [(view, finding)], now)
    assert shown.summary.endswith(
        "; it waits on vLLMEngine.generate (pid 300 on 10.0.0.5, running 4 min), which is "
        "hung in generate (engine.py:42), waiting on a lock or condition: 3 stacks "
        "unchanged, CPU 0%, no GPU"), shown.summary
    assert (shown.details["root"]["task_id"], shown.details["root"]["pid"]) == ("engine", 300)


@pytest.mark.django_db(transaction=True)
def test_the_call_poll_learns_a_calls_usual_duration_and_names_it_once_overdue(
        settings) -> None:  # type: ignore[no-untyped-def]
    """The call poll and its detector on each backend, against a stand-in of Ray's state
    API (tests/raystandin.py, as Ray 2.60 lists running calls): an EasyR1 run's reward
    call seen to end three times has a usual duration (the first, a warm-up, is not
    learned; another job's calls of the name are not this one's habit); the next one,
    still running past its
    limit, opens call_overdue, which is the run's and which its page lists. The trainer's
    own Runner.run, never seen to end, raises nothing; once the hung call ends, the
    incident resolves. (test_a_hung_reward_call_is_named_within_a_minute does this on a
    real cluster with default limits, on Postgres.)"""
    from dashboard.cluster.tasks import poll_ray_state
    from dashboard.gpus.detect import evaluate_resources
    from tests.raystandin import RayStandIn, cluster_of, task_row

    settings.CALL_OVERDUE_MIN_S = 1.0  # the limit: 5 times a usual duration of a poll or so
    ray = cluster_of(live_actors=2, jobs=1)
    runner, rewarder = ray.actors
    runner["class_name"], rewarder["class_name"] = "Runner", "AutoRewardManager"
    node_ip = ray.nodes[0]["node_ip"]

    def running(*calls: tuple[int, str, dict]) -> None:
        ray.tasks = [task_row(n, name, actor) for n, name, actor in calls]

    def overdue() -> list[Incident]:
        poll_ray_state()
        evaluate_resources(timezone.now())
        return list(Incident.objects.filter(kind="call_overdue", state=Incident.FIRING))

    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    grpo = Trial.objects.create(
        experiment=Experiment.objects.create(name="grpo", cluster=cluster, paths=["/ckpt"]),
        trial_id="grpo", framework="easyr1", attempt=1, pid=runner["pid"], node_ip=node_ip,
        status=Trial.RUNNING)
    with RayStandIn(ray).running() as url:
        settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS = None, url
        settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None
        # A run that ended a week ago: its history is forgotten as others' calls end.
        CallTiming.objects.create(cluster=cluster, job_id="05000000", name=REWARD,
                                  durations=[9.0, 9.0], warmed=True,
                                  updated_at=timezone.now() - timedelta(days=8))
        for step in (1, 2, 3):  # three steps' reward calls, each seen running, then ended
            running((0, "Runner.run", runner), (step, REWARD, rewarder))
            assert overdue() == []
        # Another job's reward calls, seen running and ended (step 3's ends as they
        # begin): its own history, not this run's.
        other = {**rewarder, "job_id": "09000000"}
        for step in (7, 8, 9):
            running((0, "Runner.run", runner), (step, REWARD, other))
            assert overdue() == []
        histories = {t.job_id: len(t.durations) for t in CallTiming.objects.filter(name=REWARD)}
        # Each job's first is not learned; the week-old run's history is gone.
        assert histories == {rewarder["job_id"]: 2, "09000000": 1}
        running((0, "Runner.run", runner), (4, REWARD, rewarder))  # step 4's: it hangs
        assert overdue() == []  # its limit is not reached at its first sight
        usual = CallTiming.usual(CallTiming.objects.get(
            name=REWARD, job_id=rewarder["job_id"]).durations)
        assert usual is not None
        [incident] = wait_for(overdue, 60, 0.2, "call_overdue for step 3's reward call",
                              explain=lambda: list(RayCall.objects.values_list(
                                  "name", "first_seen_at")))
        hung = RayCall.objects.get(name=REWARD)
        assert incident.subject == f"call:{hung.task_id}"
        assert incident.summary.startswith(f"{REWARD} has run"), incident.summary
        assert f"pid {rewarder['pid']} on {node_ip}" in incident.summary, incident.summary
        assert incident.details["usual_s"] == round(usual, 1)
        assert not CallTiming.objects.filter(name="Runner.run").exists()
        # The run's: it holds the incident, and its page lists the call running now.
        wait_for(lambda: overdue() and Incident.objects.get(pk=incident.pk).trial_id
                 == grpo.pk, 30, 0.2, "the incident to be the run's")
        grpo = Trial.objects.select_related("experiment").get(pk=grpo.pk)
        assert {c["name"]: c["task_id"] for c in run_calls_payload(grpo)} == {
            "Runner.run": RayCall.objects.get(name="Runner.run").task_id, REWARD: hung.task_id}
        running((0, "Runner.run", runner))  # the reward call ended after all
        assert overdue() == []
    assert Incident.objects.get(pk=incident.pk).state == Incident.RESOLVED


@pytest.mark.both_backends
@pytest.mark.django_db
def test_a_call_first_listed_without_its_node_takes_it_once_ray_says_it() -> None:
    """Ray may list a call RUNNING before it says where it runs; the call's stacks are
    asked only once its node is known, so the node and pid Ray gives later are kept."""
    from collectors.records import CallRecord
    from dashboard.cluster.calls import ingest_calls

    cluster = Cluster.objects.get(pk=settings_cluster_pk())

    def call(node_id: str | None, pid: int | None, task: str = "t-rank0") -> CallRecord:
        return CallRecord(task_id=task, attempt=0, name="WorkerDict.generate", kind="ACTOR_TASK",
                          job_id="03000000", actor_id="a0", node_id=node_id, pid=pid)
    now = timezone.now()
    ingest_calls([call(None, None), call("n1", 41, "t-rank1")], now, cluster)
    assert RayCall.objects.get(task_id="t-rank0").node_id == ""
    ingest_calls([call("n1", 40), call("n2", 99, "t-rank1")], now + timedelta(seconds=1),
                 cluster)
    assert [(c.task_id, c.node_id, c.pid) for c in RayCall.objects.order_by("task_id")] == [
        ("t-rank0", "n1", 40), ("t-rank1", "n1", 41)]  # a known place is not rewritten
