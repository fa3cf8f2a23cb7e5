"""Detectors at the size of a big search: each poll looks only at the trials that reported,
whose deadline came, or whose process Ray now reports otherwise; a hang among 2,000
running trials is still caught within its stall limit plus a poll, a process that went
away is still caught after its grace period, and a poll pushes the rows that changed,
not every running trial.

And the rule behind it, on its own: evaluating a trial only at the deadlines next_check
gives (and when its data changes) finds the same incidents, as early, as evaluating it at
every tick."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from collectors.records import RaySession, ResultLine, TrialUpdate
from dashboard.cluster import tasks
from dashboard.cluster.models import Actor, Cluster, Node, settings_cluster_pk
from dashboard.cluster.sessions import note_answer, note_failure
from dashboard.cluster.tasks import poll_ray_state
from dashboard.core import push
from dashboard.core.health import record
from dashboard.core.models import SourceHealth
from dashboard.incidents.models import Incident
from dashboard.incidents.trial_rules import (
    Baseline,
    StepTiming,
    Thresholds,
    TrialSnapshot,
    evaluate_trial,
    next_check,
)
from dashboard.trials import detect
from dashboard.trials.models import Trial
from dashboard.trials.store import store_updates
from dashboard.trials.tasks import poll_trial_logs
from tests.raystandin import RayStandIn, cluster_of

# 2,000: the rules hold at any size (each poll's share of the trials is what is asserted);
# 10,000 running trials, and how long their polls take, is bench/running_trials_bench.py.
# At 10,000 this test alone took 2.5 minutes of one core, a tenth of the suite's main run.
TRIALS = 2_000
NODES = 50
EVERY_S = 10  # each trial reports every 10 s
TICK_S = 2  # a poll every 2 s of moved time
HUNG, GONE = 1321, 1765
STALL_MIN_S, GONE_GRACE_S = 30, 10


def name(n: int) -> str:
    return f"{n:05d}_{n * 7919 % 100000:05d}"


def ip(n: int) -> str:
    return f"10.2.{n % NODES // 250}.{n % NODES % 250 + 1}"


def update(n: int, iterations: range, at: datetime) -> TrialUpdate:
    """Tune's results of trial n: iteration i reported at `at` minus EVERY_S per step."""
    last = iterations[-1]
    lines = tuple(ResultLine(trial_id=name(n), attempt=1, iteration=i,
                             at=at - timedelta(seconds=EVERY_S * (last - i)),
                             time_this_iter_s=9.0, pid=30_000 + n, node_ip=ip(n),
                             hostname=f"gpu-{n % NODES}", metrics={"score": 1.0 / i},
                             byte_offset=i * 100) for i in iterations)
    first = iterations[0] == 1
    return TrialUpdate(experiment="big_asha", experiment_dir=f"gpu-{n % NODES}:/r/big_asha",
                       trial_id=name(n), trainable="train", directory=f"/r/big_asha/{name(n)}",
                       tensorboard=False, results=lines,
                       tune_status="RUNNING" if first else None)


class Clock:
    """timezone.now, moved by the test: every stamp raywatch writes or reads."""

    def __init__(self) -> None:
        self.now = timezone.now()

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def big_search(transactional_db: None, settings: Any,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """2,000 RUNNING trials, each with 4 results at 10 s intervals, their latest spread
    over the last 10 s; one live actor for each; Ray's view current."""
    yield from running_search(TRIALS, settings, monkeypatch)


@pytest.fixture
def small_search(transactional_db: None, settings: Any,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from running_search(300, settings, monkeypatch)


def running_search(trials: int, settings: Any, monkeypatch: pytest.MonkeyPatch
                   ) -> Iterator[Clock]:
    settings.STALL_MIN_S, settings.STALL_FACTOR = STALL_MIN_S, 2.0
    settings.GONE_GRACE_S = GONE_GRACE_S
    settings.CENTRAL_LOGS = False
    clock = Clock()
    monkeypatch.setattr(timezone, "now", clock)
    t0 = clock.now
    cluster = settings_cluster_pk()
    Node.objects.bulk_create([Node(cluster_id=cluster, node_id=f"{k:056x}", node_ip=ip(k),
                                   state="ALIVE", first_seen_at=t0, last_seen_at=t0,
                                   updated_at=t0) for k in range(NODES)])
    Actor.objects.bulk_create([
        Actor(cluster_id=cluster, actor_id=f"{n:032x}", state="ALIVE", pid=30_000 + n,
              node_id=f"{n % NODES:056x}", required_resources={"GPU": 1}, first_seen_at=t0,
              updated_at=t0) for n in range(trials)], batch_size=2000)
    store_updates([update(n, range(1, 5), t0 - timedelta(seconds=n % EVERY_S))
                   for n in range(trials)], t0)
    forget_process()  # a fresh process: the first poll looks at every trial
    yield clock
    forget_process()


def forget_process() -> None:
    for kept in (detect._last_start, detect._last_live, detect._last_states, detect._windows):
        kept.clear()


def ray_answered(at: datetime) -> None:
    record("ray", "", 2.0, 5.0, None, [])
    SourceHealth.objects.filter(source="ray", scope="").update(last_success_at=at)


def test_a_hang_among_2000_running_trials_is_caught_and_a_poll_looks_at_what_changed(
        big_search: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = big_search
    t0 = t1 = clock.now
    sent: list[tuple[str, str, Any]] = []
    monkeypatch.setattr(push, "send_many", lambda messages: sent.extend(messages) or
                        len(messages))
    ray_answered(t0)
    poll_trial_logs()
    assert Trial.objects.filter(status=Trial.RUNNING).count() == TRIALS
    assert not Incident.objects.exists()

    looked_at: list[int] = []
    evaluate = detect.evaluate_trials

    def counted(at: datetime) -> dict[str, Any]:
        result = evaluate(at)
        looked_at.append(result["evaluated"])
        return result

    monkeypatch.setattr("dashboard.trials.tasks.evaluate_trials", counted)
    # GONE's actor dies with it, a few seconds in; HUNG stops reporting, its actor alive.
    Actor.objects.filter(pid=30_000 + GONE).update(state="DEAD")
    stall_at = gone_at = None
    iteration = {n: 4 for n in range(TRIALS)}
    for tick in range(1, (STALL_MIN_S + 15) // TICK_S + 2):
        now = clock.now = t1 + timedelta(seconds=tick * TICK_S)  # the agents' reports...
        due = [n for n in range(TRIALS) if n not in (HUNG, GONE)
               and (now - t0).total_seconds() >= (iteration[n] - 3) * EVERY_S - n % EVERY_S]
        for n in due:
            iteration[n] += 1
        store_updates([update(n, range(iteration[n], iteration[n] + 1), now) for n in due],
                      now)
        clock.now += timedelta(seconds=1)  # ...then the poll
        ray_answered(clock.now)
        sent.clear()
        poll_trial_logs()
        firing = set(Incident.objects.filter(state=Incident.FIRING).values_list(
            "kind", "subject"))
        if stall_at is None and ("trial_stalled", f"trial:big_asha/{name(HUNG)}") in firing:
            stall_at = clock.now
            # What went out: the rows of the trials this poll changed, not 2,000.
            rows = [m for m in sent if m[1] == "trial"]
            assert f"trial-{Trial.objects.get(trial_id=name(HUNG)).pk}" in {g for g, _, _
                                                                         in sent}
            assert len(rows) <= 5, f"{len(rows)} trial rows pushed for one stall"
        if gone_at is None and ("trial_process_gone",
                                f"trial:big_asha/{name(GONE)}") in firing:
            gone_at = clock.now
        # Nothing else: no other trial stalls or is gone.
        assert firing <= {("trial_stalled", f"trial:big_asha/{name(HUNG)}"),
                          ("trial_process_gone", f"trial:big_asha/{name(GONE)}")}, firing

    hung_last = t0 - timedelta(seconds=HUNG % EVERY_S)
    assert stall_at is not None, "the hang among 2,000 trials was never caught"
    # Its limit is max(stall minimum, 2 x its 10 s interval) = 30 s: caught at the first
    # poll past it, within the stall minimum + 15 s.
    assert STALL_MIN_S < (stall_at - hung_last).total_seconds() <= STALL_MIN_S + TICK_S
    assert gone_at is not None, "the trial whose process went away was never caught"
    assert GONE_GRACE_S <= (gone_at - t1).total_seconds() <= GONE_GRACE_S + 2 * TICK_S + 1
    # Each poll looked at the trials that reported (1 in 5 a 2 s tick) and the few that
    # were due, not at all 2,000; but the first after the process's first poll, which
    # marked every trial's process alive and so saved every row once.
    assert max(looked_at[1:]) < TRIALS // 4, looked_at

    # The hung trial reports again: its stall resolves at the next poll.
    clock.now += timedelta(seconds=TICK_S)
    store_updates([update(HUNG, range(5, 6), clock.now)], clock.now)
    clock.now += timedelta(seconds=1)
    ray_answered(clock.now)
    poll_trial_logs()
    assert not Incident.objects.filter(kind="trial_stalled", state=Incident.FIRING).exists()


def test_a_stall_storm_opens_every_stall_but_probes_a_bounded_number_a_poll(
        small_search: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole search freezes at once (or raywatch's own ingest fell behind): every stall
    opens in one poll that does not probe 300 processes; the ones not probed say why."""
    clock = small_search
    ray_answered(clock.now)
    poll_trial_logs()
    probed: list[str] = []
    stacks: list[str] = []
    monkeypatch.setattr(detect, "activity_of", lambda trial, now: probed.append(
        trial.trial_id) or detect.Activity(source="the agent of gpu-0", cpu_percent=0.0))
    def request_stack(trial: Trial, now: datetime) -> tuple[None, str]:
        """As the real one answers when nothing is taken yet (a trial past its slow limit
        is sampled before it stalls; a stall that opens is asked again, its row being
        the real one's)."""
        stacks.append(trial.trial_id)
        return None, ""

    monkeypatch.setattr(detect, "request_stack", request_stack)
    clock.now += timedelta(seconds=STALL_MIN_S + EVERY_S + 1)  # nobody reported since
    ray_answered(clock.now)
    poll_trial_logs()
    stalls = Incident.objects.filter(kind="trial_stalled", state=Incident.FIRING)
    assert stalls.count() == 300
    assert len(probed) == len(set(stacks)) == detect.PROBES_PER_POLL
    unread = [i for i in stalls if i.details["activity_unknown"]]
    assert len(unread) == 300 - detect.PROBES_PER_POLL
    assert "more than 50 trials stalled at once" in unread[0].details["activity_unknown"]


# --- the rule: evaluating at next_check's deadlines finds what every tick finds ---------
TH = Thresholds(stall_min_s=20, stall_factor=5, slow_factor=3, slow_min_excess_s=2,
                slow_for_s=8, slow_window=20, gone_grace_s=6, errored_recent_s=86400)
T0 = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)


def timeline(rng: random.Random) -> tuple[list[StepTiming], datetime | None, datetime]:
    """Steps of a trial whose phases slow down, hang or stop at random; when its process
    goes (or None); the end of the run."""
    steps, at = [], T0
    fast, slow = rng.uniform(0.5, 3), rng.uniform(6, 40)
    slow_from, slow_to = rng.randint(5, 25), rng.randint(25, 45)
    for i in range(1, rng.randint(8, 50)):
        took = slow if slow_from <= i < slow_to else fast
        at += timedelta(seconds=took + rng.uniform(0, 0.3))
        steps.append(StepTiming(i, at, took, {"timing_s/reward": took - 0.2,
                                              "timing_s/gen": 0.2}))
    gone = at + timedelta(seconds=rng.uniform(0, 60)) if rng.random() < 0.4 else None
    return steps, gone, at + timedelta(seconds=120)


def snapshot(steps: list[StepTiming], gone: datetime | None, now: datetime,
             found: dict[str, Any]) -> TrialSnapshot:
    done = [s for s in steps if s.at and s.at <= now]
    alive = gone is None or now < gone
    kept = found.get("step_time_regression")
    return TrialSnapshot(
        trial_id="t", experiment="e", status="RUNNING", process_alive=alive,
        process_gone_since=None if alive else gone,
        last_result_at=done[-1].at if done else None, steps=done[-21:],
        slow_baseline=Baseline.from_details(kept.details) if kept else None,
        gone_firing="trial_process_gone" in found)


def first_firing(steps: list[StepTiming], gone: datetime | None, end: datetime,
                 every_tick: bool) -> dict[str, datetime]:
    """When each kind first fires, evaluated every 0.5 s, or only when a step arrived, the
    process went, or next_check's deadline came (the poll's tick that reaches it)."""
    firsts: dict[str, datetime] = {}
    found: dict[str, Any] = {}
    check: datetime | None = T0
    now, seen = T0, 0
    while now <= end:
        arrived = sum(1 for s in steps if s.at and s.at <= now)
        went = gone is not None and now >= gone
        if every_tick or arrived != seen or (check is not None and check <= now) or (
                went and "went" not in found):
            if went:
                found["went"] = True
            seen = arrived
            snap = snapshot(steps, gone, now, found)
            result = evaluate_trial(snap, TH, now)
            found = {f.kind: f for f in result} | ({"went": True} if went else {})
            for f in result:
                firsts.setdefault(f.kind, now)
            check = next_check(snap, result, TH, now)
        now += timedelta(seconds=0.5)
    return firsts


@pytest.mark.parametrize("seed", range(40))
def test_evaluating_at_the_deadlines_finds_what_every_tick_finds(seed: int) -> None:
    steps, gone, end = timeline(random.Random(seed))
    assert first_firing(steps, gone, end, every_tick=False) == \
        first_firing(steps, gone, end, every_tick=True)


def test_the_window_read_for_the_rules_keeps_each_results_time_and_timing_phases(
        transactional_db: None) -> None:
    """What the rules get of a trial's recent results, on either database: the time each
    was reported, its step time, and the metrics that are timings (RAYWATCH_TIMING_KEYS'
    globs), none else; only the current attempt's last window."""
    at = datetime(2026, 11, 25, 3, 0, 1, 250000, tzinfo=UTC)
    metrics = {"timing_s/gen": 1.5, "timing_s/reward": 3, "score": 0.5, "reward_time_s": 2.0,
               "timing": 7.0, "time/x": "text", "timing_s/none": None}
    lines = tuple(ResultLine(trial_id="t1", attempt=1, iteration=i,
                             at=at + timedelta(seconds=i), time_this_iter_s=1.0 + i, pid=1,
                             node_ip="10.0.0.1", hostname="h", metrics=metrics, byte_offset=i)
                  for i in range(1, 31))
    store_updates([TrialUpdate(experiment="e", experiment_dir="n:/e", trial_id="t1",
                               trainable="f", directory="/e/t1", tensorboard=False,
                               results=lines)], at)
    trial = Trial.objects.get(trial_id="t1")
    steps = detect.recent_steps([trial], window=5)[trial.pk]
    assert [s.iteration for s in steps] == list(range(25, 31))
    assert steps[-1].at == at + timedelta(seconds=30)
    assert steps[-1].total_s == 31.0
    assert steps[-1].phases == {"timing_s/gen": 1.5, "timing_s/reward": 3.0,
                                "reward_time_s": 2.0}
    # Kept in the process, the window then grows by what is new, and reads the same as a
    # process reading it whole; a new attempt starts a window of its own.
    more = tuple(replace(line, iteration=line.iteration + 30, byte_offset=line.byte_offset
                         + 30, at=line.at + timedelta(seconds=30)) for line in lines[:3])
    retry = tuple(replace(line, attempt=2) for line in lines[:2])
    for update_lines in (more, retry):
        store_updates([TrialUpdate(experiment="e", experiment_dir="n:/e", trial_id="t1",
                                   trainable="f", directory="/e/t1", tensorboard=False,
                                   results=update_lines)], at)
        trial = Trial.objects.get(trial_id="t1")
        kept = detect.recent_steps([trial], window=5)[trial.pk]
        detect._windows.clear()
        assert kept == detect.recent_steps([trial], window=5)[trial.pk]
    assert [(s.iteration, s.total_s) for s in kept] == [(1, 2.0), (2, 3.0)]


def test_a_trial_error_waits_for_rays_next_answer(small_search: Clock) -> None:
    """A head going down kills the driver, which writes error.txt for every trial, often
    before raywatch's next Ray poll finds the head gone: an error opens nothing until Ray
    has answered after it came (a poll later), and then opens its incident."""
    clock = small_search
    detect.evaluate_trials(clock.now)
    Cluster.objects.filter(pk=settings_cluster_pk()).update(last_seen_at=clock.now)
    clock.now += timedelta(seconds=TICK_S)
    failed = replace(update(7, range(5, 6), clock.now), error_text="RuntimeError: boom",
                     error_at=clock.now, tune_status="ERROR")
    store_updates([failed], clock.now)
    detect.evaluate_trials(clock.now)
    errored = Incident.objects.filter(kind="trial_errored")
    assert not errored.exists()

    clock.now += timedelta(seconds=TICK_S)  # Ray answers: the same session, still there
    Cluster.objects.filter(pk=settings_cluster_pk()).update(last_seen_at=clock.now)
    detect.evaluate_trials(clock.now)
    assert [(i.subject.rsplit("/", 1)[-1], i.state) for i in errored] == [
        (name(7), Incident.FIRING)]


def test_an_error_held_while_its_cluster_does_not_answer_waits_for_the_cluster(
        small_search: Clock) -> None:
    """An error read while its cluster does not answer waits for the cluster's verdict
    (it may be the head going down). The polls meanwhile do not look at it again each
    time: a history first read while Ray is down holds every errored trial of it, and
    each poll re-evaluating them cost the server 1.7x its steady CPU. The cluster
    answering again is looked at at once: the same session back makes the error news."""
    clock = small_search
    detect.evaluate_trials(clock.now)
    cluster = Cluster.objects.filter(pk=settings_cluster_pk())
    cluster.update(last_seen_at=clock.now)
    clock.now += timedelta(seconds=TICK_S)
    cluster.update(state=Cluster.UNREACHABLE)
    store_updates([replace(update(n, range(5, 6), clock.now), error_text="RuntimeError: boom",
                           error_at=clock.now, tune_status="ERROR") for n in (7, 8)],
                  clock.now)
    detect.evaluate_trials(clock.now)
    errored = Incident.objects.filter(kind="trial_errored")
    assert not errored.exists()

    looked_at = []
    for _ in range(5):  # Ray still down: the held errors wait, unread
        clock.now += timedelta(seconds=TICK_S)
        looked_at.append(detect.evaluate_trials(clock.now)["evaluated"])
    # The next poll sees the rows the one that read them wrote (a poll looks at what
    # changed since the previous one began); then nothing, where each poll looked at both.
    assert looked_at[1:] == [0] * 4 and not errored.exists()

    clock.now += timedelta(seconds=TICK_S)  # Ray answers: the same session, still there
    cluster.update(state=Cluster.ACTIVE, last_seen_at=clock.now)
    assert detect.evaluate_trials(clock.now)["evaluated"] >= 2
    assert sorted(i.subject.rsplit("/", 1)[-1] for i in errored) == [name(7), name(8)]
    assert {i.state for i in errored} == {Incident.FIRING}


def test_an_actor_that_died_waits_out_the_gone_grace_of_the_same_head(
        small_search: Clock) -> None:
    """`ray stop` ends the head's raylet and trials first: the dying driver writes Ray's
    "the actor died unexpectedly" into error.txt for every trial while the head's
    dashboard still answers for a second or more. An actor that died waits for an answer
    asked RAYWATCH_GONE_GRACE_S after raywatch read it; an exception the trial raised
    (trial 8) needs only one answer asked after it."""
    clock = small_search
    detect.evaluate_trials(clock.now)
    clock.now += timedelta(seconds=TICK_S)
    died = ("Failure # 1 (occurred at 2026-11-28_15-18-49)\n"
            f"{detect.ACTOR_DIED}\n\tclass_name: ImplicitFunc\n"
            "The actor is dead because its owner has died. Owner's node has crashed.")
    raised = "ray.exceptions.RayTaskError(ValueError): ray::ImplicitFunc.train()\nValueError: nan"
    store_updates([replace(update(7, range(5, 6), clock.now), error_text=died,
                           error_at=clock.now, tune_status="ERROR"),
                   replace(update(8, range(5, 6), clock.now), error_text=raised,
                           error_at=clock.now, tune_status="ERROR")], clock.now)
    read_at = clock.now
    errored = Incident.objects.filter(kind="trial_errored")

    def answered_at(at: datetime) -> list[str]:
        clock.now = at
        Cluster.objects.filter(pk=settings_cluster_pk()).update(last_seen_at=at)
        detect.evaluate_trials(at)
        return sorted(i.subject.rsplit("/", 1)[-1] for i in errored.all())

    # The same head answers a second after the read: the raised error is news, the
    # actor that died is not yet.
    assert answered_at(read_at + timedelta(seconds=1)) == [name(8)]
    assert answered_at(read_at + timedelta(seconds=GONE_GRACE_S - 1)) == [name(8)]
    # Still the same head, the grace later: its actor died on a head that stayed.
    assert answered_at(read_at + timedelta(seconds=GONE_GRACE_S + 1)) == [name(7), name(8)]


def test_results_after_the_last_answer_of_a_head_that_restarted_are_its_sessions(
        small_search: Clock) -> None:
    """On a loaded machine the last Ray poll a head answered can be seconds before it went
    down, and its trials reported until then. Their "actor died" errors, held while the
    head did not answer, are of the session that ended when a poll first found it down:
    a new head answering (a new session) opens nothing for them."""
    clock = small_search
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    with transaction.atomic():
        note_answer(cluster, RaySession("session_old"), "http://head:8265", clock.now)
    detect.evaluate_trials(clock.now)
    clock.now += timedelta(seconds=1.5)  # reported after the head's last answer
    store_updates([update(7, range(5, 6), clock.now)], clock.now)
    clock.now += timedelta(seconds=0.5)  # `ray stop`: the next poll finds no head
    cluster.refresh_from_db()
    note_failure(cluster, "connection refused", clock.now)
    clock.now += timedelta(seconds=0.2)  # the dying driver's error.txt
    died = f"Failure # 1\n{detect.ACTOR_DIED}\n\tclass_name: ImplicitFunc"
    store_updates([replace(update(7, range(5, 6), clock.now), results=(), error_text=died,
                           error_at=clock.now, tune_status="ERROR")], clock.now)
    detect.evaluate_trials(clock.now)
    clock.now += timedelta(seconds=GONE_GRACE_S + 2)  # `ray start --head`: a new session
    cluster.refresh_from_db()
    with transaction.atomic():
        note_answer(cluster, RaySession("session_new"), "http://head:8265", clock.now)
    detect.evaluate_trials(clock.now)
    assert not Incident.objects.filter(kind="trial_errored").exists()
    # The same error from a head that answered again as itself is news.
    clock.now += timedelta(seconds=1)
    store_updates([replace(update(8, range(5, 6), clock.now), error_text=died,
                           error_at=clock.now, tune_status="ERROR")], clock.now)
    clock.now += timedelta(seconds=GONE_GRACE_S + 1)
    cluster.refresh_from_db()
    with transaction.atomic():
        note_answer(cluster, RaySession("session_new"), "http://head:8265", clock.now)
    detect.evaluate_trials(clock.now)
    assert [i.subject.rsplit("/", 1)[-1] for i in Incident.objects.filter(
        kind="trial_errored")] == [name(8)]


def test_an_error_read_while_a_ray_poll_is_out_waits_for_an_answer_asked_after_it(
        small_search: Clock, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's answer counts from when raywatch asked. On a loaded machine a Ray poll takes
    seconds; the error.txt a dying driver wrote while it was out is read meanwhile, and
    that poll's answer (asked before) says nothing of whether the head is still there:
    the error waits for the next one, and opens when that one comes from the same head."""
    clock = small_search
    ray = RayStandIn(cluster_of(live_actors=1, jobs=1))
    asked_ray = tasks.fetch_cluster
    with ray.running() as url:
        settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS = None, url
        settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH = None, None
        poll_ray_state()
        detect.evaluate_trials(clock.now)

        def slow_poll(*args: Any, **kwargs: Any) -> Any:
            reply = asked_ray(*args, **kwargs)
            clock.now += timedelta(seconds=TICK_S)  # the poll is still out: the error comes
            store_updates([replace(update(7, range(5, 6), clock.now),
                                   error_text="RuntimeError: boom", error_at=clock.now,
                                   tune_status="ERROR")], clock.now)
            clock.now += timedelta(seconds=TICK_S)
            return reply

        monkeypatch.setattr(tasks, "fetch_cluster", slow_poll)
        poll_ray_state()
        detect.evaluate_trials(clock.now)
        errored = Incident.objects.filter(kind="trial_errored")
        assert not errored.exists()

        monkeypatch.setattr(tasks, "fetch_cluster", asked_ray)
        clock.now += timedelta(seconds=TICK_S)
        poll_ray_state()  # asked after the error: the same head answers
        detect.evaluate_trials(clock.now)
    assert [(i.subject.rsplit("/", 1)[-1], i.state) for i in errored] == [
        (name(7), Incident.FIRING)]


def test_a_trial_that_finished_while_rays_view_was_stale_loses_its_process_later(
        small_search: Clock) -> None:
    """Trial 5 ends (Tune says TERMINATED) while Ray's view of the cluster is not current:
    nothing is known gone then, so it keeps its process. Once Ray answers again without
    its actor, the finished trial has no process: it is looked at again, finished or not."""
    clock = small_search
    ray_answered(clock.now)
    detect.evaluate_trials(clock.now)
    clock.now += timedelta(seconds=120)  # Ray's view goes stale
    store_updates([replace(update(5, range(5, 6), clock.now), tune_status="TERMINATED")],
                  clock.now)
    detect.evaluate_trials(clock.now)
    clock.now += timedelta(seconds=TICK_S)
    detect.evaluate_trials(clock.now)  # a poll later, still stale: its end is old news
    ended = Trial.objects.get(trial_id=name(5))
    assert ended.status == Trial.TERMINATED and ended.process_alive is True

    Actor.objects.filter(pid=30_005).update(state="DEAD")
    clock.now += timedelta(seconds=TICK_S)
    ray_answered(clock.now)
    detect.evaluate_trials(clock.now)
    ended.refresh_from_db()
    assert ended.process_alive is False and ended.status == Trial.TERMINATED
    # A trial still running beside it kept its process.
    assert Trial.objects.get(trial_id=name(6)).process_alive is True
