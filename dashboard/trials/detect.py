"""Trial detection: reconcile status with Ray, build snapshots, run the trial
rules (dashboard.incidents.trial_rules) and sync their incidents.

A trial's process is alive when Ray lists a live actor with the trial's pid on
the trial's node (result.json's pid equals the actor's pid: docs/ray-facts.md).
When the Ray source is failing, liveness is unknown and nothing is concluded.

A stalled trial is looked at (probes.py): busy or idle, read by the best source, and
its Python stack, asked for once per stall and taken in the background (stacks.py).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Max, OuterRef, Q, Subquery
from django.utils import timezone

from collectors.pystack import RAY_GET, lifecycle_of
from collectors.raystate import death_words
from dashboard.cluster.models import Actor, Cluster, ClusterSession, Node
from dashboard.cluster.state import current_clusters
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.service import sync_findings
from dashboard.incidents.trial_rules import (
    TRIAL_KINDS,
    Baseline,
    StepTiming,
    Thresholds,
    TrialSnapshot,
    derive_status,
    evaluate_trial,
    needs_verdict,
    next_check,
    phase_timings,
    trial_stalled,
)
from dashboard.trials.bulkwrite import update_rows
from dashboard.trials.models import Experiment, StepResult, Trial, TrialStack
from dashboard.trials.probes import Activity, activity_of
from dashboard.trials.runs import (
    bind_runs,
    discover_runs,
    follow_ray_get,
    in_run_calls,
    is_run,
    runs_of_failed_jobs,
    runs_to_bind,
    shadowed,
    waited_call_ended,
    waits_on_a_call,
)
from dashboard.trials.stacks import (
    give_up_after,
    quiet_since,
    request_stack,
    stack_payload,
    stacks_of_stalls,
)


def thresholds() -> Thresholds:
    return Thresholds(
        stall_min_s=settings.STALL_MIN_S, stall_factor=settings.STALL_FACTOR,
        slow_factor=settings.SLOW_FACTOR, slow_min_excess_s=settings.SLOW_MIN_EXCESS_S,
        slow_for_s=settings.SLOW_FOR_S, slow_window=settings.SLOW_WINDOW,
        gone_grace_s=settings.GONE_GRACE_S, errored_recent_s=settings.ERRORED_RECENT_H * 3600,
        hang_factor=settings.CALL_OVERDUE_FACTOR, hang_min_s=settings.CALL_OVERDUE_MIN_S,
    )


# Incremental: a poll evaluates the trials whose data changed since the previous one began
# (new results, status, error: their rows were saved, and Trial.updated_at says when),
# those whose deadline came (Trial.check_at: a stall limit, a grace period, set by the
# evaluation before), and those whose process Ray now reports otherwise (an actor came or
# went, or its cluster's state changed); the incidents of the others stay as they are.
# The first evaluation of a process looks at every trial that can have a finding. 10,000
# running trials cost a poll what the ~1,000 that reported since cost. Wall-clock times,
# as auto_now stamps updated_at.
_last_start: list[datetime] = []  # since when the next evaluation looks for changes
_last_live: dict[int, dict[tuple[str, int], float]] = {}  # what Ray said then
_last_states: dict[int, str] = {}  # each cluster's state then (Cluster.state)
# An error held because its cluster does not answer is looked at again when the cluster's
# state or Ray's view of it changes, and at least this often: not every poll, which for a
# history first read while Ray was down (every errored trial of it held) cost 1.7x the
# server's steady CPU at 250 errored trials (bench/quiet_history_bench.py, first start).
HELD_RECHECK_S = 60.0


# Trials evaluated at once: a process's first evaluation after a long history was read
# looks at thousands (every trial not derived finished yet), and all of them at once set
# the process's high-water mark for good (~14 KB a trial while evaluated: 5,000 at once
# held 7 MB more than 200 at a time). A poll's usual few are one chunk.
EVALUATE_CHUNK = 200


@dataclass
class _Poll:
    """What one evaluation knows of the world, and its budgets, across its chunks."""

    now: datetime
    started: datetime
    live: dict[int, dict[tuple[str, int], float]]
    restarted: dict[int, datetime]
    th: Thresholds
    ended: set[int]
    unreachable: set[int]
    answered: dict[int, datetime]
    asked: int = 0  # stack requests made (PROBES_PER_POLL a poll)
    stalled: int = 0  # trials found stalled so far
    result: dict[str, Any] = field(default_factory=lambda: {
        "status_changes": 0, "evaluated": 0, "trials": set()})


def evaluate_trials(now: datetime) -> dict[str, Any]:
    """Evaluate what changed or is due; the counts of what happened, and in "trials" the
    pks of the trials whose row or incidents changed (what the pages need again)."""
    started = timezone.now()
    since = changed_since(started)
    horizon = change_horizon(started)
    live = live_processes(now)
    # Ray's answers before the sessions they ended (one transaction writes both,
    # cluster/sessions.note_answer): an answer from a restarted head is never read
    # without the end of the session before it.
    clusters = list(Cluster.objects.values_list("pk", "state", "last_seen_at"))
    answered = {pk: seen for pk, _, seen in clusters if seen is not None}
    states = {pk: state for pk, state, _ in clusters}
    poll = _Poll(
        now=now, started=started, live=live, restarted=session_ends(),
        th=thresholds(),
        # A cluster that ended (torn down, head lost) runs nothing, and neither does a
        # session that a restarted head ended: their trials' incidents resolve.
        ended={pk for pk, state in states.items() if state == Cluster.ENDED},
        unreachable={pk for pk, state in states.items() if state == Cluster.UNREACHABLE},
        answered=answered)
    discover_runs(since)  # RL trainers Ray lists are runs before they print anything
    pks = trials_to_evaluate(since, now, live, [pk for pk in states.keys() | _last_states.keys()
                                                if states.get(pk) != _last_states.get(pk)])
    pks += of_ended_session_firing(poll.restarted, set(pks))
    query = Trial.objects.defer(*UNREAD_BY_RULES)
    for start in range(0, max(len(pks), 1), EVALUATE_CHUNK):
        chunk = pks[start:start + EVALUATE_CHUNK]
        trials = with_experiments(list(query.filter(pk__in=chunk))) if chunk else []
        # The first chunk also speaks for the incidents no trial has (none stays open).
        _evaluate(trials, poll, with_trialless=start == 0)
    _last_start[:] = [horizon]
    _last_live.clear()
    _last_live.update(live)
    _last_states.clear()
    _last_states.update(states)
    return poll.result


def _evaluate(trials: list[Trial], poll: _Poll, with_trialless: bool) -> None:
    now, th, started = poll.now, poll.th, poll.started
    alive_before = {t.pk: t.process_alive for t in trials}
    bound = bind_runs(trials)  # RL runs: their trainer actor's process, or job's end
    update_rows(Trial, [t for t in trials if t.pk in bound],
                ["pid", "node_ip", "hostname", "tune_status", "process_alive",
                 "process_gone_since", "error_text", "error_at", "error_read_at",
                 "error_attempt"])
    # Ray's live processes were read before the trainers: a run whose trainer bind_runs
    # just found dead is gone, though that older view may still list its pid.
    gone = {t.pk for t in trials if t.pk in bound and t.process_alive is False
            and alive_before[t.pk] is not False}
    changed = [t for t in trials
               if reconcile(t, poll.live, now, gone=t.pk in gone) or t.pk in bound]
    for trial in changed:
        trial.updated_at = started
    update_rows(Trial, changed, ["status", "status_reason", "process_alive", "gpus",
                                 "process_gone_since", "updated_at"])
    steps = recent_steps([t for t in trials if t.status == Trial.RUNNING], th.slow_window)
    baselines = slow_baselines(trials)
    firing = history_firing(trials)
    findings: list[Finding] = []
    context: dict[str, dict[str, Any]] = {}
    stalled: list[Trial] = []
    checks: dict[int, datetime | None] = {}
    held: set[int] = set()  # errors that wait for Ray: looked at again, finished or not
    agents = silences([t for t in trials if t.status == Trial.RUNNING], now)
    # The stacks taken in each quiet running trial's silence, and their verdict (hung or
    # busy): only those silent at least hang_min_s can have had theirs sampled.
    quiet = now - timedelta(seconds=th.hang_min_s)
    sampled = stacks_of_stalls([t for t in trials if t.status == Trial.RUNNING
                                and (since := quiet_since(t)) and since < quiet])
    spoken_for = shadowed(trials)  # a console run whose trainer's file-logged run is judged
    in_call = in_run_calls([t for t in trials if t.status == Trial.RUNNING])
    died = deaths([t for t in trials if t.process_alive is False])
    for trial in trials:
        if trial.experiment.cluster_id in poll.ended or trial.pk in spoken_for \
                or of_ended_session(trial, poll.restarted):
            checks[trial.pk] = None
            continue
        snapshot = replace(snapshot_of(trial, steps.get(trial.pk, []), baselines.get(trial.pk)),
                           errored_firing="trial_errored" in firing.get(trial.pk, ()),
                           gone_firing="trial_process_gone" in firing.get(trial.pk, ()),
                           **agents.get(trial.pk, {}),
                           **sampled_verdict(sampled.get(trial.pk), now),
                           in_run_call=in_call.get(trial.pk),
                           **death_of(died.get(trial.pk)))
        sampling, followed = False, None
        stack = sampled.get(trial.pk)
        if stack is not None and stack.hung and stack.waits_on == RAY_GET and is_run(trial):
            # Its trainer waits on a call of its job: that call's stacks judge the run
            # (a long rollout is busy; a reward that hangs is the hang, named).
            followed = follow_ray_get(trial, now)
            if followed is None and stack.taken_at and waited_call_ended(trial, stack.taken_at):
                # Taken while it waited on a call that has ended since (a long rollout
                # done): they say nothing of now, when it may be in its own reward. Its
                # stacks are taken again (within the poll's budget; else at a later
                # poll); nothing is judged on the old ones.
                if poll.asked < PROBES_PER_POLL:
                    request_stack(trial, now)
                    poll.asked += 1
                followed = (None, "")
            if followed is not None:
                snapshot = replace(snapshot, hung=followed[0], verdict=followed[1])
                sampling = followed[0] is None
        needs = needs_verdict(snapshot, th, now) and followed is None
        stalled_now = trial_stalled(snapshot, th, now) is not None
        # An RL run silent because its trainer waits on a call that call_overdue judges:
        # that rule names the hang (asked once, only of a trial that needs a verdict or is
        # stalled).
        waits = (needs or stalled_now) and waits_on_a_call(trial)
        waits_on_call = stalled_now and waits
        if needs and not waits:
            # Past its usual step by far: is it hung? Its node's agent samples its stacks
            # (once a silence), and it is looked at each poll until they are in.
            if stack is not None and stack.hung is False:  # busy a while ago: again
                stack = None
            if stack is None and poll.asked < PROBES_PER_POLL:
                stack, _ = request_stack(trial, now)
                poll.asked += 1
            sampling = stack is None or (stack.state == TrialStack.PENDING
                                         and now - stack.requested_at < give_up_after())
            # Asked (now or before) and not in: hung or busy is theirs to say, not a
            # regression's of the step in progress.
            snapshot = replace(snapshot, verdict_pending=stack is not None and sampling)
        if stalled_now and not waits_on_call:
            stalled.append(trial)
            poll.stalled += 1
            snapshot = with_activity(snapshot, activity_of(trial, now) if poll.stalled
                                     <= PROBES_PER_POLL else TOO_MANY_STALLS)
        found = evaluate_trial(snapshot, th, now)
        if waits_on_call:  # call_overdue names the hang; looked at again each poll
            found = [f for f in found if f.kind != "trial_stalled"]
        if any(in_progress_regression(f) for f in found) and is_run(trial) and (
                waits or waits_on_a_call(trial)):
            # The step in progress waits on a call that call_overdue judges: one hang, one
            # incident (the call's, at its own limit), not a slow step beside it.
            found = [f for f in found if not in_progress_regression(f)]
            waits = True
        kept = held_while_unreachable(found, snapshot) \
            if awaits_ray(trial, poll.unreachable, poll.answered, th.gone_grace_s) else found
        findings.extend(kept)
        if len(kept) < len(found):
            held.add(trial.pk)
        # Only a held error, a run waiting on a call and a trial whose stacks are awaited
        # are looked at again each poll, not every trial of the cluster; an error held
        # because its cluster does not answer, when the cluster changes (HELD_RECHECK_S).
        if trial.pk in held and trial.experiment.cluster_id in poll.unreachable:
            checks[trial.pk] = now + timedelta(seconds=HELD_RECHECK_S)
        else:
            checks[trial.pk] = now if trial.pk in held or waits or sampling \
                else next_check(snapshot, kept, th, now)
        context[snapshot.subject] = {"trial": trial, "experiment": trial.experiment.name,
                                     "node_ip": trial.node_ip}
    stacks = stacks_of_stalls(stalled)
    findings = [with_stack(f, context[f.subject]["trial"], stacks, now) for f in findings]
    covered = Q(trial__in=trials)
    if with_trialless:
        covered |= Q(trial__isnull=True)
    touched: set[str] = set()
    counts = sync_findings(TRIAL_KINDS, findings, now, context, among=covered,
                           touched=touched)
    # Stack requests for stalls that just opened: the first PROBES_PER_POLL of the poll.
    first = max(0, PROBES_PER_POLL - (poll.stalled - len(stalled)))
    for trial in stalled[:first]:
        if trial.pk not in stacks:  # its incident just opened: where does it hang?
            request_stack(trial, now)
    schedule(trials, checks, held)
    forget_windows(trials)
    result = poll.result
    for name, count in counts.items():
        result[name] = result.get(name, 0) + count
    result["status_changes"] += len(changed)
    result["evaluated"] += len(trials)
    by_subject = {subject: c["trial"].pk for subject, c in context.items()}
    result["trials"] |= {t.pk for t in changed} | {
        by_subject[s] for s in touched if s in by_subject}


def session_ends() -> dict[int, datetime]:
    """When the last ended session of each cluster that has a current one ended: the
    cluster's head restarted then (dashboard.cluster.sessions)."""
    current = ClusterSession.objects.filter(ended_at__isnull=True).values("cluster_id")
    return dict(ClusterSession.objects.filter(ended_at__isnull=False, cluster_id__in=current)
                .values("cluster_id").annotate(end=Max("ended_at"))
                .values_list("cluster_id", "end"))


# What Ray says when an actor died rather than raised (ray/exceptions.py, Ray 2.60:
# ActorDiedError.BASE_ERROR_MSG); Tune writes it into error.txt. It is what a head going
# down leaves for every trial ("... its owner has died ... Owner's node has crashed").
ACTOR_DIED = "The actor died unexpectedly before finishing this task."


def awaits_ray(trial: Trial, unreachable: set[int], answered: dict[int, datetime],
               grace_s: float) -> bool:
    """Whether the trial's error waits for Ray's next answer: its cluster does not answer,
    or no answer was asked for after raywatch read the error. A head going down kills the
    driver, which writes error.txt for every trial, often before raywatch's next Ray poll
    finds the head gone; one answer asked later says which it was (a poll at most). An
    answer counts from when it was asked (cluster/tasks.poll_one): a slow poll already
    out when the error was read says nothing of it. An actor that died (not one that
    raised) waits for an answer asked `grace_s` (RAYWATCH_GONE_GRACE_S) after the read:
    a head being stopped still answers for a second or more after its trials died
    (measured: the error 0.9 s into `ray stop`, the dashboard gone at 1.6 s, longer under
    load)."""
    cluster = trial.experiment.cluster_id
    if cluster in unreachable:
        return True
    last = answered.get(cluster)  # None: a cluster never heard from (logs alone): no wait
    read = trial.error_read_at or trial.updated_at  # rows stored before error_read_at
    if last is None or read is None:
        return False
    if ACTOR_DIED in trial.error_text:
        read += timedelta(seconds=grace_s)
    return last < read


def held_while_unreachable(found: list[Finding], snapshot: TrialSnapshot) -> list[Finding]:
    """A trial error that comes while its cluster does not answer (its head went down: the
    dying driver writes error.txt for every trial) waits for the cluster's verdict: a new
    session or an end makes it history, the same session back makes it news."""
    return [f for f in found if f.kind != "trial_errored" or snapshot.errored_firing]


def of_ended_session_firing(ends: dict[int, datetime], known: set[int]) -> list[int]:
    """Trials of an ended session that still have a firing incident, besides `known`: a
    finding made before raywatch saw the new session (an error.txt the dying driver
    wrote) resolves though nothing new comes of the trial. Only firing ones are read."""
    if not ends:
        return []
    firing = (Trial.objects.select_related("experiment__cluster").defer(*UNREAD_BY_RULES)
              .filter(experiment__cluster_id__in=list(ends), incidents__state=Incident.FIRING)
              .distinct())
    return [t.pk for t in firing if t.pk not in known and of_ended_session(t, ends)]


def of_ended_session(trial: Trial, ends: dict[int, datetime]) -> bool:
    """A trial last heard of before its cluster's head restarted: its actor went with the
    old session (Tune's trials do not outlive the GCS), so it is history, not gone."""
    end = ends.get(trial.experiment.cluster_id)
    heard = trial.last_result_at or trial.first_seen_at
    return end is not None and heard is not None and heard <= end


UNREAD_BY_RULES = ("config", "last_metrics", "metric_range", "last_parse_error")

# Sources that say a trial's results are known only up to some time (its node agents
# went silent): register_silence(fn), fn(running trials, now) -> {trial pk: TrialSnapshot
# fields}. The agents app registers its own in AppConfig.ready(): this app does not
# import it.
SilenceSource = Callable[[list[Trial], datetime], dict[int, dict[str, Any]]]
# Past this long a source holds no trial's clock (a hang must not wait on an agent gone
# for good, or on a log reader stuck on a hung file system): the stall says why instead.
SILENCE_HOLD_MAX_S = 600.0
_silence_sources: list[SilenceSource] = []


def register_silence(source: SilenceSource) -> None:
    if source not in _silence_sources:
        _silence_sources.append(source)


def silences(trials: list[Trial], now: datetime) -> dict[int, dict[str, Any]]:
    """Each trial held by any source: at the earliest data any of them has, with every
    note."""
    found: dict[int, dict[str, Any]] = {}
    for source in _silence_sources:
        for pk, held in source(trials, now).items():
            if (before := found.get(pk)) is None:
                found[pk] = dict(held)
                continue
            untils = [u for u in (before.get("data_until"), held.get("data_until")) if u]
            notes = [n for n in (before.get("agent_note"), held.get("agent_note")) if n]
            found[pk] = {"data_until": min(untils) if untils else None,
                         "agent_note": "; ".join(notes)}
    return found


def trials_to_evaluate(since: datetime | None, now: datetime,
                       live: dict[int, dict[tuple[str, int], float]],
                       clusters_changed: Sequence[int] = ()) -> list[int]:
    """The pks of the trials to look at: every one that can have a finding (a process's
    first evaluation), else what changed, is due, or whose process Ray says moved, or
    whose cluster's state changed (`clusters_changed`)."""
    if since is None:
        return list(Trial.objects.filter(can_have_findings()).distinct()
                    .order_by("pk").values_list("pk", flat=True))
    found = set(Trial.objects.filter(Q(updated_at__gte=since) | Q(check_at__lte=now))
                .values_list("pk", flat=True))
    rebind = runs_to_bind(since)
    # A finished trial is looked at again only while it still has a process (one that
    # ended while Ray's view was not current keeps it until Ray says otherwise), or a
    # deadline: an error held until its cluster answers.
    unfinished = ~Q(status__in=Trial.FINISHED) | Q(process_alive=True) | Q(
        check_at__isnull=False)
    states = [Q(experiment__cluster_id__in=list(clusters_changed))] if clusters_changed else []
    for moved in [*liveness_changed(_last_live, live), *([rebind] if rebind else []),
                  *states]:
        found.update(Trial.objects.filter(moved).filter(unfinished)
                     .values_list("pk", flat=True))
    if (failed := runs_of_failed_jobs(since)) is not None:  # ended ones too: why they did
        found.update(Trial.objects.filter(failed).values_list("pk", flat=True))
    return sorted(found)


def with_experiments(trials: list[Trial]) -> list[Trial]:
    """The trials, each with its experiment and cluster: one instance of each, shared by
    its trials, not a copy per trial row as select_related makes (a process's first
    evaluation loads every trial of a history that was just read: 5,000 copies of the
    same 100 experiments were a third of that poll's high-water mark)."""
    experiments = Experiment.objects.select_related("cluster").in_bulk(
        {t.experiment_id for t in trials})
    for trial in trials:
        trial.experiment = experiments[trial.experiment_id]
    return trials


# Past this many changed processes in one cluster, its unfinished trials are all looked at
# (a search starting or ending at once) instead of a long list of pids.
MANY_MOVED = 2000


def liveness_changed(before: dict[int, dict[tuple[str, int], float]],
                     after: dict[int, dict[tuple[str, int], float]]) -> list[Q]:
    """The trials whose process Ray reports otherwise than at the previous evaluation: of
    a cluster whose view became current or stale, all; else those with the pid of an
    actor that came, went or changed its GPUs (reconcile then matches the node)."""
    found: list[Q] = []
    for cluster in before.keys() ^ after.keys():
        found.append(Q(experiment__cluster_id=cluster))
    for cluster in before.keys() & after.keys():
        moved = before[cluster].items() ^ after[cluster].items()
        pids = sorted({pid for (_, pid), _ in moved})
        if len(pids) > MANY_MOVED:
            found.append(Q(experiment__cluster_id=cluster))
        elif pids:
            found.append(Q(experiment__cluster_id=cluster, pid__in=pids))
    return found


def schedule(trials: list[Trial], checks: dict[int, datetime | None], held: set[int]) -> None:
    """Store each evaluated trial's next deadline where it moved. A finished trial has
    none, unless its error waits for Ray (`held`): an errored trial is finished."""
    due = []
    for trial in trials:
        check = checks.get(trial.pk) if (trial.pk in held or trial.status
                                         not in Trial.FINISHED) else None
        if check != trial.check_at:
            trial.check_at = check
            due.append(trial)
    update_rows(Trial, due, ["check_at"])


# A stall storm (thousands of trials past their limit at once: a whole search frozen, or
# raywatch's own ingest fell behind) must not turn a poll into thousands of probes and
# stack requests: the first PROBES_PER_POLL stalled trials of a poll are looked at, the
# others say why not; the next polls look at those again (a firing trial is evaluated
# every poll).
PROBES_PER_POLL = 50
TOO_MANY_STALLS = Activity(source="", cpu_percent=None, unknown=(
    f"not read: more than {PROBES_PER_POLL} trials stalled at once, and raywatch looks at "
    f"{PROBES_PER_POLL} of them a poll"))


def with_activity(snapshot: TrialSnapshot, activity: Activity) -> TrialSnapshot:
    return replace(snapshot, cpu_percent=activity.cpu_percent, process_state=activity.state,
                   rss_bytes=activity.rss_bytes, activity_source=activity.source,
                   activity_unknown=activity.unknown)


def sampled_verdict(stack: TrialStack | None, now: datetime) -> dict[str, Any]:
    """What a snapshot holds of the stacks taken in its trial's silence: their verdict, or
    that they are being taken."""
    if stack is not None and stack.state == TrialStack.PENDING:
        return {"verdict_pending": now - stack.requested_at < give_up_after()}
    if stack is None or stack.state != TrialStack.TAKEN:
        return {}
    return {"hung": stack.hung, "verdict": stack.verdict, "verdict_at": stack.taken_at,
            "during": lifecycle_of(stack.text) if stack.hung is False else ""}


def with_stack(finding: Finding, trial: Trial, stacks: dict[int, TrialStack],
               now: datetime) -> Finding:
    """A stall's finding carries the stack of this stall, as far as it was taken."""
    if finding.kind != "trial_stalled" or trial.pk not in stacks:
        return finding
    return replace(finding, details={**finding.details,
                                     "stack": stack_payload(stacks[trial.pk], now)})


def changed_since(started: datetime) -> datetime | None:
    """Trials saved after this need evaluating; None: all of them (the first pass in this
    process, or the clock went back)."""
    if not _last_start or started < _last_start[0]:
        return None
    return _last_start[0]


# A writer stamps updated_at inside its transaction, which may commit after an evaluation
# has read the table: the next evaluation must reach back to the oldest transaction open
# when this one began (an agent's report being stored), not to this one's start.
CLOCK_SKEW = timedelta(milliseconds=200)  # between the writers' clocks and the database's
LONGEST_REACH = timedelta(seconds=60)  # a transaction open longer is not waited for


def change_horizon(started: datetime) -> datetime:
    """What the next evaluation takes as `since`: the start of the oldest transaction of
    another session open now (Postgres); elsewhere this start less a quarter of a second
    (SQLite, the embedded default: one writer at a time, whose transactions there last
    milliseconds)."""
    if connection.vendor != "postgresql":
        return started - timedelta(seconds=0.25)
    with connection.cursor() as cursor:
        cursor.execute("SELECT min(xact_start) FROM pg_stat_activity WHERE datname = "
                       "current_database() AND pid <> pg_backend_pid() "
                       "AND xact_start IS NOT NULL")
        oldest = cursor.fetchone()[0]
    if oldest is None or oldest - CLOCK_SKEW > started:
        return started
    # The database's clock against this host's: reach a little further.
    return max(oldest - CLOCK_SKEW, started - LONGEST_REACH)


def can_have_findings() -> Q:
    """What a process's first evaluation looks at: every trial that can have a finding,
    or an incident to resolve."""
    return (~Q(status__in=Trial.FINISHED) | Q(incidents__state=Incident.FIRING)
            | Q(status="ERROR", error_text__gt=""))


def live_processes(now: datetime) -> dict[int, dict[tuple[str, int], float]]:
    """Per cluster whose Ray view is current (a cluster pk), the (node_ip, pid) of every
    live actor with the GPUs it asked Ray for; a cluster that is not current is absent:
    nothing of it is known gone."""
    current = current_clusters(now)
    ips = dict(Node.objects.filter(cluster_id__in=current).values_list("node_id", "node_ip"))
    live: dict[int, dict[tuple[str, int], float]] = {pk: {} for pk in current}
    for cluster_id, node_id, pid, resources in Actor.objects.filter(
            cluster_id__in=current, state="ALIVE", pid__isnull=False).values_list(
            "cluster_id", "node_id", "pid", "required_resources"):
        gpus = (resources or {}).get("GPU") if isinstance(resources, dict) else None
        live[cluster_id][(ips.get(node_id, ""), pid)] = float(gpus or 0)
    return live


def reconcile(trial: Trial, live: dict[int, dict[tuple[str, int], float]],
              now: datetime, gone: bool = False) -> bool:
    """Its status and liveness from `live` (Ray's live processes); `gone`: its process is
    known gone from newer news than `live` (a run's trainer listed dead)."""
    before = (trial.status, trial.status_reason, trial.process_alive, trial.process_gone_since,
              trial.gpus)
    of_cluster = live.get(trial.experiment.cluster_id)
    alive = None if of_cluster is None or trial.pid is None else \
        not gone and (trial.node_ip, trial.pid) in of_cluster
    if alive:  # what its actor asked Ray for: the GPU-hours per experiment count on it
        trial.gpus = of_cluster[(trial.node_ip, trial.pid)]  # type: ignore[index]
    if alive is not None:
        if alive:
            trial.process_gone_since = None
        elif trial.process_alive is not False or trial.process_gone_since is None:
            trial.process_gone_since = now
        trial.process_alive = alive
    error_present = bool(trial.error_text) and trial.attempt <= trial.error_attempt
    trial.status, trial.status_reason = derive_status(trial.tune_status, error_present, alive,
                                                      trial.ended_by, run=is_run(trial))
    return before != (trial.status, trial.status_reason, trial.process_alive,
                      trial.process_gone_since, trial.gpus)


# Per process: each running trial's recent steps as last read (which trial row, its
# attempt, the newest iteration read, the steps oldest first). A poll reads only the
# results newer than that: ~1 row a trial that reported, not its whole window. A trial's
# TensorBoard steps may still change (tags arrive in pieces): read whole every time.
_windows: dict[int, tuple[Any, int, int, list[StepTiming]]] = {}


def recent_steps(trials: list[Trial], window: int) -> dict[int, list[StepTiming]]:
    """The last `window + 1` results of each trial's current attempt, as step timings."""
    if not trials:
        return {}
    patterns = settings.TIMING_KEYS
    ranges: list[tuple[int, int, int, int]] = []
    kept: dict[int, list[StepTiming]] = {}
    for trial in trials:
        newest = trial.iteration or 0
        cached = _windows.get(trial.pk)
        if (cached is not None and cached[:2] == (trial.first_seen_at, trial.attempt)
                and cached[2] <= newest and trial.experiment.kind != Experiment.TENSORBOARD):
            kept[trial.pk] = cached[3]
            if cached[2] < newest:
                ranges.append((trial.pk, trial.attempt, cached[2], newest))
        else:
            ranges.append((trial.pk, trial.attempt, newest - window - 1, newest))
    read: dict[int, list[StepTiming]] = defaultdict(list)
    for trial_id, iteration, at, total_s, stored in _window_rows(ranges, patterns):
        metrics = json.loads(stored) if isinstance(stored, str) else stored
        read[trial_id].append(StepTiming(iteration=iteration, at=at, total_s=total_s,
                                         phases=phase_timings(metrics or {}, patterns)))
    found: dict[int, list[StepTiming]] = {}
    for trial in trials:
        new = sorted(read.get(trial.pk, ()), key=lambda s: s.iteration)
        steps = (kept.get(trial.pk, []) + new)[-(window + 1):]
        found[trial.pk] = steps
        newest = max(trial.iteration or 0, steps[-1].iteration if steps else 0)
        _windows[trial.pk] = (trial.first_seen_at, trial.attempt, newest, steps)
    return found


def forget_windows(trials: list[Trial]) -> None:
    """Drop the kept windows of trials that no longer run."""
    for trial in trials:
        if trial.status != Trial.RUNNING:
            _windows.pop(trial.pk, None)


WINDOW_CHUNK = 200  # trials a query: 4 parameters each (SQLite allows 999 a statement)


def _window_rows(ranges: list[tuple[int, int, int, int]],
                 patterns: list[str]) -> Iterator[tuple[Any, ...]]:
    """(trial, iteration, at, time_this_iter_s, metrics) of each (trial, attempt, after,
    up to) range: a range on the (trial, attempt, iteration) index, so the cost follows
    the window, not how many results a long-running trial has stored. One join against
    the ranges a chunk: an OR of a filter per trial cost ~0.2 ms a trial to build, and
    SQLite refuses one of more than ~1,000 trials. On Postgres only the metrics that may
    be timings come back (a real search reports tens of metrics a result), and `at` as
    epoch seconds (parsing timestamps cost more than the rules)."""
    table = StepResult._meta.db_table
    postgres = connection.vendor == "postgresql"
    if postgres:
        columns = ("EXTRACT(EPOCH FROM s.at), s.time_this_iter_s, (SELECT jsonb_object_agg("
                   "key, value) FROM jsonb_each(s.metrics) WHERE key ~ %s)")
        head = [timing_regex(patterns)]
    else:
        columns, head = "s.at, s.time_this_iter_s, s.metrics", []
    with connection.cursor() as cursor:
        for start in range(0, len(ranges), WINDOW_CHUNK):
            chunk = ranges[start:start + WINDOW_CHUNK]
            cursor.execute(
                f"WITH w(trial_id, attempt, lo, hi) AS (VALUES "
                f"{', '.join(['(%s, %s, %s, %s)'] * len(chunk))}) "
                f"SELECT s.trial_id, s.iteration, {columns} "
                f"FROM {table} s JOIN w ON s.trial_id = w.trial_id AND s.attempt = w.attempt "
                "AND s.iteration > w.lo AND s.iteration <= w.hi",
                [*(value for r in chunk for value in r), *head])
            for trial_id, iteration, stored_at, total_s, metrics in cursor.fetchall():
                if stored_at is None:
                    at = None
                elif postgres:
                    at = datetime.fromtimestamp(float(stored_at), UTC)
                else:
                    at = connection.ops.convert_datetimefield_value(stored_at, None, connection)
                yield trial_id, iteration, at, total_s, metrics


def timing_regex(patterns: list[str]) -> str:
    """A POSIX regex matching every key the glob patterns match (a few more at most: a
    [...] class becomes any character); phase_timings then applies the globs exactly."""
    def one(pattern: str) -> str:
        out, i = [], 0
        while i < len(pattern):
            ch = pattern[i]
            if ch == "*":
                out.append(".*")
            elif ch == "?":
                out.append(".")
            elif ch == "[" and "]" in pattern[i + 1:]:
                out.append(".")
                i = pattern.index("]", i + 1)
            else:
                out.append(re.escape(ch))
            i += 1
        return "".join(out)

    return "^(" + "|".join(one(p) for p in patterns) + ")$" if patterns else "^(?!)$"


def slow_baselines(trials: list[Trial]) -> dict[int, Baseline]:
    """The baseline each firing step_time_regression was opened against: a slowdown
    is judged against the timings from before it began for as long as it lasts."""
    wanted = {t.pk for t in trials}
    rows = Incident.objects.filter(state=Incident.FIRING, kind="step_time_regression",
                                   trial__isnull=False).values_list("trial_id", "details")
    rows = [(pk, details) for pk, details in rows if pk in wanted]
    found = {pk: Baseline.from_details(details) for pk, details in rows}
    return {pk: baseline for pk, baseline in found.items() if baseline is not None}


def in_progress_regression(finding: Finding) -> bool:
    return finding.kind == "step_time_regression" and bool(finding.details.get("in_progress"))


def death_of(death: tuple[bool, str] | None) -> dict[str, str]:
    """A snapshot's fields for how its process died, as Ray said."""
    if death is None:
        return {}
    on_purpose, words = death
    return {"ended_on_purpose": words} if on_purpose else {"death": words}


def deaths(gone: list[Trial]) -> dict[int, tuple[bool, str]]:
    """Why Ray says the actors of the trials among `gone` (their process gone) died, when
    it was asked (dashboard/cluster/failures.note_deaths): trial pk -> (ended on purpose,
    in words). On purpose: its owner or a user ended it (Tune pausing or stopping it,
    ray.kill). One query."""
    keyed = {(t.experiment.cluster_id, t.node_ip, t.pid): t.pk for t in gone if t.pid}
    if not keyed:
        return {}
    found: dict[int, tuple[bool, str]] = {}
    for cluster, pid, node_ip, reason, message, on_purpose, crash in Actor.objects.filter(
            state="DEAD", pid__in={k[2] for k in keyed},
            cluster_id__in={k[0] for k in keyed}).exclude(death_reason="").annotate(
            node_ip=Subquery(Node.objects.filter(cluster_id=OuterRef("cluster_id"),
                                                 node_id=OuterRef("node_id"))
                             .values("node_ip")[:1])).values_list(
            "cluster_id", "pid", "node_ip", "death_reason", "death_message",
            "ended_on_purpose", "crash"):
        pk = keyed.get((cluster, node_ip or "", pid))
        if pk is not None and reason != "UNKNOWN":
            found[pk] = (bool(on_purpose), death_words(reason, message, crash))
    return found


def history_firing(trials: list[Trial]) -> dict[int, set[str]]:
    """The open trial_errored / trial_process_gone incidents of the errored or gone trials
    (the rules leave an old failure or an old disappearance alone unless its incident is
    already open): trial pk -> kinds, in one query."""
    wanted = {t.pk for t in trials if t.status == Trial.ERROR or t.process_alive is False}
    if not wanted:
        return {}
    found: dict[int, set[str]] = defaultdict(set)
    for pk, kind in Incident.objects.filter(
            state=Incident.FIRING, kind__in=("trial_errored", "trial_process_gone"),
            trial__in=wanted).values_list("trial_id", "kind"):
        found[pk].add(kind)
    return found


def snapshot_of(trial: Trial, steps: list[StepTiming],
                slow_baseline: Baseline | None = None) -> TrialSnapshot:
    return TrialSnapshot(
        trial_id=trial.trial_id, experiment=trial.experiment.name, status=trial.status,
        process_alive=trial.process_alive, process_gone_since=trial.process_gone_since,
        last_result_at=trial.last_result_at, error_text=trial.error_text,
        started_at=None if trial.last_result_at else quiet_since(trial),
        error_at=trial.error_at, ended_by=trial.ended_by,
        node_ip=trial.node_ip, pid=trial.pid, slow_baseline=slow_baseline, steps=steps,
        noun="Run" if is_run(trial) else "Trial",
    )
