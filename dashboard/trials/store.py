"""Storing what was read of trial directories by the one collector (the agent's), on
whichever host it ran: raywatch's own (ingest.py, files on this host) or a node's agent
(the agents app, trial_log records). One path: experiments by name, trials by
(experiment, trial_id), results de-duplicated on (trial, attempt, iteration), so one
trial seen in several places (the driver's live copy and Tune's storage copy, a shared
filesystem seen by two nodes, an agent and raywatch's own host) is stored once.

A TrialStore loads only the rows of the trials it is given, in batches: its cost grows
with what changed, not with the history in the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import chain
from typing import Any

from django.db import transaction
from django.utils import timezone

from collectors.agent.trialwire import place_node
from collectors.records import TUNE, ResultLine, TrialUpdate
from collectors.runformats import RANK_WORKER, refine
from collectors.tunelogs import MAX_METRICS
from dashboard.cluster.models import Actor, Node, settings_cluster_pk
from dashboard.trials.bulkwrite import ResultRow, insert_new, insert_results, update_rows
from dashboard.trials.models import Experiment, RunRank, StepResult, Trial

BATCH = 400  # trials per batch of row loads: IN (...) lists stay under SQLite's limit
# What reading a trial's files may change on its row: saved for the changed trials of a
# batch in one go, and only these (the detectors write status and the process facts).
INGESTED_FIELDS = (
    "attempt", "iteration", "last_result_at", "last_ingested_at", "pid", "node_ip",
    "hostname", "last_metrics", "metric_range", "last_step_s", "config", "error_text",
    "error_attempt", "error_at", "error_read_at", "tune_status", "parse_errors",
    "last_parse_error", "framework", "writer_pid", "updated_at",
)


@dataclass
class IngestStats:
    files_read: int = 0
    bytes_read: int = 0
    results: int = 0
    problems: int = 0
    changed_trials: set[int] = field(default_factory=set)
    # Made into chart points (point()) only when pushed: a first ingest stores millions.
    new_points: dict[int, list[ResultLine]] = field(default_factory=dict)
    checked: int = 0  # trial dirs statted by the scan
    known: int = 0  # trial dirs under the roots
    dirs: int = 0  # trial dirs first seen or settled (PollStats.dirs)
    busy: bool = False  # another process was reading the log dirs: this poll read nothing


class TrialStore:
    """Trial rows of one cluster's experiments (default: the cluster RAY_ADDRESS points
    at), loaded a batch at a time."""

    def __init__(self, now: datetime, stats: IngestStats | None = None,
                 cluster_pk: int | None = None) -> None:
        self.now = now
        self.stats = stats or IngestStats()
        self.cluster_pk = cluster_pk if cluster_pk is not None else settings_cluster_pk()
        self.experiments: dict[str, Experiment] = {}
        self.trials: dict[tuple[int, str], Trial] = {}

    def load(self, keys: Iterable[tuple[str, str]]) -> None:
        """The rows of these (experiment, trial_id): one query each for experiments and
        trials. Keep a batch under BATCH keys; forget() the trials after it."""
        keys = list(keys)
        names = {name for name, _ in keys} - set(self.experiments)
        if names:
            self.experiments.update((e.name, e) for e in Experiment.objects.filter(
                cluster_id=self.cluster_pk, name__in=names))
        wanted = {self.experiments[n].pk for n, _ in keys if n in self.experiments}
        self._load_trials(wanted, {t for _, t in keys})

    def _load_trials(self, experiment_pks: set[int], trial_ids: set[str]) -> None:
        by_pk = {e.pk: e for e in self.experiments.values()}
        for trial in Trial.objects.filter(experiment_id__in=experiment_pks,
                                          trial_id__in=trial_ids):
            trial.experiment = by_pk[trial.experiment_id]
            self.trials[(trial.experiment_id, trial.trial_id)] = trial

    def forget(self) -> None:
        self.trials.clear()

    # --- experiments and trials ---------------------------------------------------------
    def ensure(self, updates: Iterable[TrialUpdate]) -> None:
        """Create the trials these updates name that are not stored yet: one INSERT for
        a batch of them (a concurrent writer's rows are kept), then one load."""
        missing: dict[tuple[int, str], Trial] = {}
        for update in updates:
            experiment = self._experiment(update)
            key = (experiment.pk, update.trial_id[:255])
            if key not in self.trials and key not in missing:
                missing[key] = Trial(experiment=experiment, trial_id=key[1],
                                     directory=update.directory,
                                     trainable=update.trainable[:255],
                                     framework=update.framework)
        if missing:
            insert_new(Trial, list(missing.values()))
            self._load_trials({pk for pk, _ in missing}, {t for _, t in missing})

    def trial(self, update: TrialUpdate) -> Trial:
        key = (self._experiment(update).pk, update.trial_id[:255])
        if key not in self.trials:
            self.ensure([update])
        return self.trials[key]

    def _experiment(self, update: TrialUpdate) -> Experiment:
        name = update.experiment[:255]
        experiment = self.experiments.get(name)
        if experiment is None:
            kind = (Experiment.CONSOLE if update.console else
                    Experiment.TENSORBOARD if update.tensorboard else
                    Experiment.TUNE if update.framework in ("", TUNE) else Experiment.JSONL)
            experiment, _ = Experiment.objects.get_or_create(
                cluster_id=self.cluster_pk, name=name,
                defaults={"kind": kind, "paths": [update.experiment_dir]})
            self.experiments[name] = experiment
        elif update.experiment_dir not in experiment.paths:
            experiment.paths = [*experiment.paths, update.experiment_dir]
            experiment.save(update_fields=["paths", "updated_at"])
        return experiment

    # --- updates --------------------------------------------------------------------------------
    def apply_many(self, updates: Sequence[TrialUpdate]) -> None:
        """Store updates, in order (a trial's lines may span several): the trials'
        facts are worked out here, then one write for all the results and one for all
        the trials that changed, whatever their number."""
        if not updates:
            return
        self.ensure(updates)
        updates = self._rank_claims(updates)
        # Trials with no result stored yet (a first ingest): their rows can be COPYed.
        fresh = {t.pk for t in map(self.trial, updates) if t.iteration is None}
        rows: dict[tuple[int, int, int], ResultRow] = {}
        changed: dict[int, Trial] = {}
        with transaction.atomic():
            for update in updates:
                trial = self.trial(update)
                if self._take(trial, update, rows):
                    changed[trial.pk] = trial
            self.stats.results += write_results(
                [r for r in rows.values() if r[0] in fresh], fresh=True)
            self.stats.results += write_results(
                [r for r in rows.values() if r[0] not in fresh])
            for trial in changed.values():
                trial.updated_at = timezone.now()
            update_rows(Trial, changed.values(), INGESTED_FIELDS)
            store_ranks([(self.trial(u), u) for u in updates if u.rank is not None
                         and u.writer_pid], self.now)
        self.stats.changed_trials.update(changed)

    def _rank_claims(self, updates: Sequence[TrialUpdate]) -> list[TrialUpdate]:
        """The updates, a rank's claim that a log line cannot make taken out of its own:
        a process keeps the first rank its log said in the run, and a rank stays with
        its process while Ray lists that process alive (a restart's new process takes
        it once the old one is gone). A refused claim keeps nothing of the rank (not the
        run's process, not its steps) and is a visible problem of the run."""
        claims = [(self.trial(u), u) for u in updates if u.rank is not None and u.writer_pid]
        if not claims:
            return list(updates)
        held = {(r.trial_id, r.rank): r for r in RunRank.objects.filter(
            trial_id__in={t.pk for t, _ in claims})}
        refused: dict[int, str] = {}
        for index, update in enumerate(updates):
            if update.rank is None or not update.writer_pid:
                continue
            trial = self.trial(update)
            mine = next((r.rank for r in held.values() if r.trial_id == trial.pk
                         and r.pid == update.writer_pid and r.node == _node(update)), None)
            holder = held.get((trial.pk, update.rank))
            if mine is not None and mine != update.rank:
                refused[index] = (f"pid {update.writer_pid} said it is rank {update.rank}, "
                                  f"but it is rank {mine} of this run: kept as rank {mine}")
            elif holder is not None and (holder.pid, holder.node) != (
                    update.writer_pid, _node(update)) and _alive(trial, holder):
                refused[index] = (f"pid {update.writer_pid} said it is rank {update.rank}, "
                                  f"held by pid {holder.pid}, which Ray lists alive: refused")
            else:
                held[(trial.pk, update.rank)] = RunRank(
                    trial_id=trial.pk, rank=update.rank, pid=update.writer_pid,
                    node=_node(update))
        return [replace(u, rank=None, writer_pid=None, results=(), rank_step=None,
                        problem_count=u.problem_count + 1, last_problem=refused[i])
                if i in refused else u for i, u in enumerate(updates)]

    def _take(self, trial: Trial, update: TrialUpdate,
              rows: dict[tuple[int, int, int], ResultRow]) -> bool:
        changed = self._problems(trial, update)
        changed = self._results(trial, update, rows) or changed
        return self._facts(trial, update) or changed

    def _problems(self, trial: Trial, update: TrialUpdate) -> bool:
        if update.problem_count:
            trial.parse_errors += update.problem_count
            self.stats.problems += update.problem_count
        if update.last_problem:
            trial.last_parse_error = update.last_problem[:2000]
        return bool(update.problem_count or update.last_problem)

    def _results(self, trial: Trial, update: TrialUpdate,
                 rows: dict[tuple[int, int, int], ResultRow]) -> bool:
        if not update.results:
            return False
        if update.tensorboard:
            self.stats.results += merge_steps(trial, update.results, self.now)
        else:
            for line in update.results:
                key = (trial.pk, line.attempt, line.iteration)
                rows.setdefault(key, (*key, line.at, self.now, line.time_this_iter_s,
                                      line.metrics))
        widen_ranges(trial.metric_range, update.results)
        latest = max(update.results, key=lambda r: (r.attempt, r.iteration))
        if not _may_move(trial, latest):  # the process a line names is shown, not obeyed
            latest = replace(latest, pid=None, node_ip=None, hostname=None)
        _apply_latest(trial, latest, self.now)
        self.stats.new_points.setdefault(trial.pk, []).extend(update.results)
        return True

    def _facts(self, trial: Trial, update: TrialUpdate) -> bool:
        changed = False
        framework = refine(trial.framework, update.framework, update.results)
        if framework != trial.framework:
            trial.framework, changed = framework, True
        if update.params is not None and not trial.config:
            trial.config, changed = update.params, True
        if update.error_text and update.error_text != trial.error_text:
            trial.error_text, trial.error_attempt = update.error_text, trial.attempt
            trial.error_at, trial.error_read_at, changed = update.error_at, self.now, True
        if update.tune_status and update.tune_status != trial.tune_status:
            trial.tune_status, changed = update.tune_status, True
        # A rank's log is its run's, but only rank 0's process is the run's (a Ray Train
        # run's result is rank 0's).
        if update.writer_pid and update.writer_pid != trial.writer_pid \
                and update.rank in (None, 0):
            trial.writer_pid, changed = update.writer_pid, True
        if update.search_metric or update.search_mode:
            changed = _search(trial.experiment, update) or changed
        return changed


def _node(update: TrialUpdate) -> str:
    """The node a rank's update was read on, as its RunRank row keeps it."""
    return (place_node(update.experiment_dir) or "")[:255]


def _alive(trial: Trial, rank: RunRank) -> bool:
    """Whether Ray lists the rank's process as a live Ray Train worker on its node."""
    alive = Actor.objects.filter(cluster_id=trial.experiment.cluster_id, pid=rank.pid,
                                 state="ALIVE", class_name=RANK_WORKER)
    if rank.node:
        alive = alive.filter(node_id__in=Node.objects.filter(
            cluster_id=trial.experiment.cluster_id, hostname=rank.node
        ).values_list("node_id", flat=True))
    return alive.exists()


def store_ranks(ranks: list[tuple[Trial, TrialUpdate]], now: datetime) -> None:
    """Each rank's row as its latest update says (its pid, world size, last report);
    an update that says less keeps what an earlier one said."""
    if not ranks:
        return
    rows = {(r.trial_id, r.rank): r for r in RunRank.objects.filter(
        trial_id__in={t.pk for t, _ in ranks}, rank__in={u.rank for _, u in ranks})}
    for trial, update in ranks:
        assert update.rank is not None and update.writer_pid is not None
        node = _node(update)
        row = rows.get((trial.pk, update.rank))
        if row is None:
            row = rows[(trial.pk, update.rank)] = RunRank(trial=trial, rank=update.rank,
                                                          pid=update.writer_pid)
        row.pid, row.node, row.updated_at = update.writer_pid, node, now
        row.world_size = update.world_size or row.world_size
        if update.rank_step is not None:
            row.step, row.step_at = update.rank_step, update.rank_step_at
        row.save()


def _search(experiment: Experiment, update: TrialUpdate) -> bool:
    """Keep each part of the search's objective its files state; True when it changed
    (the experiment's trials show their best by it)."""
    metric = (update.search_metric or experiment.metric)[:255]
    mode = update.search_mode or experiment.mode
    if (metric, mode) == (experiment.metric, experiment.mode):
        return False
    experiment.metric, experiment.mode = metric, mode
    experiment.save(update_fields=["metric", "mode", "updated_at"])
    return True


def store_updates(updates: Sequence[TrialUpdate], now: datetime,
                  cluster_pk: int | None = None, stats: IngestStats | None = None
                  ) -> IngestStats:
    """Store a trial-log collector's updates, in order (a trial's lines may span
    several): a node agent's, or this host's (ingest.py; `stats`: the poll's so far)."""
    store = TrialStore(now, stats, cluster_pk=cluster_pk)
    for start in range(0, len(updates), BATCH):
        batch = updates[start:start + BATCH]
        store.load((u.experiment[:255], u.trial_id[:255]) for u in batch)
        store.apply_many(batch)
        store.forget()
    return store.stats


def write_results(rows: Sequence[ResultRow], fresh: bool = False) -> int:
    """Insert new results; duplicates (the other copy of the same file, a file read
    again) are ignored. The number actually inserted."""
    return insert_results(rows, fresh)


def merge_steps(trial: Trial, lines: Sequence[ResultLine], now: datetime) -> int:
    """TensorBoard steps may arrive in pieces (a step's later tags in a later read):
    those merge into the step's metrics instead of being dropped."""
    rows: dict[tuple[int, int], StepResult] = {}
    for line in lines:
        key = (line.attempt, line.iteration)
        if key in rows:
            rows[key].metrics.update(line.metrics)
            rows[key].time_this_iter_s = line.time_this_iter_s or rows[key].time_this_iter_s
            continue
        rows[key] = StepResult(
            trial=trial, attempt=line.attempt, iteration=line.iteration, at=line.at,
            ingested_at=now, time_this_iter_s=line.time_this_iter_s, metrics=dict(line.metrics),
        )
    existing = {
        (r.attempt, r.iteration): r
        for r in StepResult.objects.filter(trial=trial, iteration__in=[k[1] for k in rows])
    }
    updates = []
    for key, new in list(rows.items()):
        old = existing.get(key)
        if old is not None:
            old.metrics = {**old.metrics, **new.metrics}
            old.time_this_iter_s = new.time_this_iter_s or old.time_this_iter_s
            updates.append(old)
            del rows[key]
    StepResult.objects.bulk_update(updates, ["metrics", "time_this_iter_s"])
    StepResult.objects.bulk_create(list(rows.values()), ignore_conflicts=True)
    return len(rows)


def _may_move(trial: Trial, latest: ResultLine) -> bool:
    """Whether a result line may move the trial to the process it names (issue 43, M1):
    not while the trial's own process is a live actor Ray lists, and never onto a process
    another running trial of the cluster names. A line read from another directory or
    node (crossed forged lines under two trials' ids) swaps no pids; a restart's line
    moves the trial once Ray lists its old process gone. Asked only when the process a
    line names is another than the trial's."""
    pid, node_ip = latest.pid, latest.node_ip or trial.node_ip
    if pid is None or trial.pid is None or (pid, node_ip) == (trial.pid, trial.node_ip):
        return True
    cluster = trial.experiment.cluster_id
    nodes = Node.objects.filter(cluster_id=cluster)
    if Actor.objects.filter(cluster_id=cluster, pid=trial.pid, state="ALIVE",
                            node_id__in=nodes.filter(node_ip=trial.node_ip)
                            .values("node_id")).exists():
        return False
    return not Trial.objects.filter(experiment__cluster_id=cluster, pid=pid, node_ip=node_ip,
                                    status=Trial.RUNNING).exclude(pk=trial.pk).exists()


def _apply_latest(trial: Trial, latest: ResultLine, now: datetime) -> None:
    if (latest.attempt, latest.iteration) < (trial.attempt, trial.iteration or 0):
        return  # an older copy of the log: keep what we have
    trial.attempt = latest.attempt
    trial.iteration = latest.iteration
    trial.last_result_at = latest.at or now
    trial.last_ingested_at = now
    trial.pid = latest.pid if latest.pid is not None else trial.pid
    trial.node_ip = latest.node_ip or trial.node_ip
    trial.hostname = latest.hostname or trial.hostname
    trial.last_metrics = dict(latest.metrics)
    trial.last_step_s = latest.time_this_iter_s


def widen_ranges(ranges: dict[str, list[float]], lines: Sequence[ResultLine]) -> None:
    """Each metric's [lowest, highest] over every result: a trial's best by any metric
    and either mode, without reading its results again. A metric at a time over the
    lines (min and max of a list), not a line at a time: a first ingest does this for
    every result."""
    for name in dict.fromkeys(chain.from_iterable(line.metrics for line in lines)):
        values = [v for line in lines if (v := line.metrics.get(name)) is not None]
        if not values:
            continue
        low, high = min(values), max(values)
        span = ranges.get(name)
        if span is not None:
            span[0], span[1] = min(span[0], low), max(span[1], high)
        elif len(ranges) < MAX_METRICS:
            ranges[name] = [low, high]


def point(line: ResultLine) -> dict[str, Any]:
    return {"attempt": line.attempt, "iteration": line.iteration,
            "at": line.at.isoformat() if line.at else None,
            "time_this_iter_s": line.time_this_iter_s, "metrics": line.metrics}
