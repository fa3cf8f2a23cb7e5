"""What a search optimises, and each trial's best by it.

The search's own files name the metric and mode (collectors.tunesearch; stored on the
Experiment by the store). Where they do not (a search without a metric, an experiment
seen only through a copy without tuner.pkl, TensorBoard runs), raywatch guesses from the
metric names and says it guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from dashboard.trials.models import Experiment, Trial

TUNE, GUESSED = "tune", "guessed"
# Guesses for a search's metric when its files do not name it, most telling first.
GUESSES = ("score", "reward_mean", "episode_reward_mean", "reward", "mean_accuracy",
           "accuracy", "val_loss", "mean_loss", "loss")
LOWER_IS_BETTER = re.compile(r"loss|error|(^|[_/])err($|[_/])|perplexity|regret|time|latency",
                             re.IGNORECASE)


@dataclass(frozen=True)
class Objective:
    metric: str | None
    mode: str  # "min" or "max"
    metric_from: str  # TUNE: the search's own files; GUESSED: raywatch's guess
    mode_from: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def guess_mode(metric: str) -> str:
    return "min" if LOWER_IS_BETTER.search(metric) else "max"


def objective_of(experiment: Experiment, metric_names: Iterable[str] = ()) -> Objective:
    """The experiment's metric and mode: its search's, else guessed from `metric_names`."""
    metric, metric_from = experiment.metric or None, TUNE
    if metric is None:
        names = set(metric_names)
        metric, metric_from = next((g for g in GUESSES if g in names), None), GUESSED
    if experiment.mode:
        return Objective(metric, experiment.mode, metric_from, TUNE)
    return Objective(metric, guess_mode(metric or ""), metric_from, GUESSED)


def best(trial: Trial, metric: str | None, mode: str) -> float | None:
    span = trial.metric_range.get(metric) if metric else None
    if not span:
        return None
    return span[0] if mode == "min" else span[1]


def objectives_by_experiment(trials: Iterable[Trial]) -> dict[int, Objective]:
    """Each experiment's objective, guessed (where needed) from its trials' metrics."""
    names: dict[int, set[str]] = {}
    experiments: dict[int, Experiment] = {}
    for trial in trials:
        experiments[trial.experiment_id] = trial.experiment
        names.setdefault(trial.experiment_id, set()).update(trial.metric_range)
    return {pk: objective_of(exp, names[pk]) for pk, exp in experiments.items()}
