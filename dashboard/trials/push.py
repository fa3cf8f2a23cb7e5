"""Live updates of trials to the pages that show them, sent after what they show was
stored: by the periodic poll (tasks.py) and by a node agent's report (the agents app).
Only what changed goes out: the rows of the trials that got results or whose status or
incidents changed, and their new points; never every running trial."""

from __future__ import annotations

import json
from collections.abc import Iterable

from django.core.cache import cache
from django.db import transaction

from dashboard.core.push import EXPERIMENTS_GROUP, batch, experiment_group, publish, trial_group
from dashboard.trials.models import Trial
from dashboard.trials.objective import objectives_by_experiment
from dashboard.trials.store import IngestStats, point
from dashboard.trials.views_data import experiments_payload, incidents_payload, trial_rows

# The experiments list sums every experiment's trials: sent at most once a second (a
# 10,000-trial search stores a hundred agent reports a second). A change inside that
# second is sent by the next trial poll (flush_experiments), at most POLL_LOGS_S later.
EXPERIMENTS_EVERY_S = 1
_SENT_KEY, _OWED_KEY = "raywatch:push:experiments:sent", "raywatch:push:experiments:owed"


def push_updates(stats: IngestStats, evaluated: Iterable[int] = ()) -> None:
    """Send the rows of the trials stored (stats.changed_trials) or whose status or
    incidents changed in an evaluation (`evaluated`: their incident lists too), and the
    new points, to the pages that show them."""
    evaluated = set(evaluated)
    pks = set(stats.changed_trials) | evaluated
    if not pks and not stats.new_points:
        return
    # A first ingest changes a whole history in one poll: its rows and messages go out
    # a few experiments at a time (each experiment's in one message, as always), not all
    # at once (5,000 trials: ~70 MB, a high-water mark the process would keep).
    *chunks, last = _chunks(pks)
    for chunk in chunks:
        with transaction.atomic(), batch():
            _push_trials(chunk, evaluated)
    with transaction.atomic(), batch():
        _push_trials(last, evaluated)
        for trial_pk, points in stats.new_points.items():
            publish(trial_group(trial_pk), "points", [point(line) for line in points])
        push_experiments()


PUSH_CHUNK = 500  # trials whose rows go out together, about (an experiment's never split)


def _chunks(pks: set[int]) -> list[set[int]]:
    """`pks` in chunks of whole experiments, about PUSH_CHUNK trials each."""
    if len(pks) <= PUSH_CHUNK:
        return [pks]
    by_experiment: dict[int, set[int]] = {}
    for experiment_id, pk in Trial.objects.filter(pk__in=pks).values_list("experiment_id", "pk"):
        by_experiment.setdefault(experiment_id, set()).add(pk)
    chunks: list[set[int]] = [set()]
    for members in by_experiment.values():
        if chunks[-1] and len(chunks[-1]) + len(members) > PUSH_CHUNK:
            chunks.append(set())
        chunks[-1] |= members
    return chunks


def _push_trials(pks: set[int], evaluated: set[int]) -> None:
    """The rows of these trials to their pages and their experiments' pages; the
    incident lists of those evaluated."""
    trials = list(Trial.objects.select_related("experiment").filter(pk__in=pks))
    rows = json.loads(json.dumps(trial_rows(trials), default=str))
    by_experiment: dict[int, list] = {}
    for row in rows:
        by_experiment.setdefault(row["experiment_id"], []).append(row)
        publish(trial_group(row["id"]), "trial", row)
    for exp_id, objective in objectives_by_experiment(trials).items():
        publish(experiment_group(exp_id), "objective", objective.as_dict())
        publish(experiment_group(exp_id), "trials", by_experiment[exp_id])
    if shown := sorted(pks & evaluated):  # incidents opened or resolved: the trial pages
        for pk, incidents in incidents_payload(shown).items():  # list them
            publish(trial_group(pk), "incidents", incidents)


def push_trials(pks: Iterable[int]) -> None:
    """The rows and incident lists of these trials to their pages, and the experiments
    list: after an incident of theirs that another detector keeps (an RL run's overdue
    call, dashboard/gpus/detect.py) opened, changed or resolved."""
    pks = set(pks)
    if pks:
        with transaction.atomic(), batch():
            _push_trials(pks, pks)
            push_experiments()


def push_points(stats: IngestStats) -> None:
    """Send the new points stored so far to their trials' pages, and forget them: called
    after each stored batch of a poll (ingest.py), so that a first ingest, which stores
    a whole history in one poll, never holds all its results as points at once (100,000
    results: ~200 MB, a high-water mark the process keeps). push_updates sends the rest."""
    points, stats.new_points = stats.new_points, {}
    if points:
        with batch():
            for trial_pk, lines in points.items():
                publish(trial_group(trial_pk), "points", [point(line) for line in lines])


def push_experiments() -> None:
    """The experiments list, unless it went out less than a second ago: then it is owed."""
    if not _send_experiments():
        cache.set(_OWED_KEY, 1, timeout=3600)


def flush_experiments() -> None:
    """Send the experiments list if a change was held back by push_experiments."""
    if cache.get(_OWED_KEY):
        with transaction.atomic():
            _send_experiments()


def _send_experiments() -> bool:
    """Publish the list unless it went out less than EXPERIMENTS_EVERY_S ago."""
    if not cache.add(_SENT_KEY, 1, timeout=EXPERIMENTS_EVERY_S):
        return False
    cache.delete(_OWED_KEY)
    publish(EXPERIMENTS_GROUP, "experiments", experiments_payload)
    return True
