"""One metric of many trials by iteration: the experiment page's cross-trial chart (what
Tune users plot from `ResultGrid` dataframes). Only that metric is read from the
database (a JSON key, not whole result rows); each trial's current attempt; the best
trials by the metric when there are more than the chart can show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dashboard.core.jsonkeys import JsonPath
from dashboard.trials.models import Experiment, StepResult, Trial
from dashboard.trials.objective import best


@dataclass(frozen=True)
class CurveRequest:
    metric: str
    mode: str  # which trials are best when not all are drawn
    max_trials: int = 100
    max_points: int = 500  # per trial; longer curves are thinned evenly


def experiment_curves(experiment: Experiment, want: CurveRequest) -> dict[str, Any]:
    trials = list(experiment.trials.all())
    chosen = ranked(trials, want)[:want.max_trials]
    values = _values(chosen, want.metric)
    curves = []
    for trial in chosen:
        points = values.get(trial.pk, [])
        if points:
            xs, ys = zip(*thin(points, want.max_points), strict=True)
            curves.append({"id": trial.pk, "trial_id": trial.trial_id, "status": trial.status,
                           "attempt": trial.attempt, "x": list(xs), "y": list(ys)})
    return {"metric": want.metric, "mode": want.mode, "trials": len(trials),
            "shown": len(curves), "curves": curves}


def ranked(trials: list[Trial], want: CurveRequest) -> list[Trial]:
    """Best first by the metric and mode; trials without a value last."""
    def key(trial: Trial) -> tuple[bool, float]:
        value = best(trial, want.metric, want.mode)
        if value is None:
            return True, 0.0
        return False, value if want.mode == "min" else -value
    return sorted(trials, key=key)


def _values(trials: list[Trial], metric: str) -> dict[int, list[tuple[int, float]]]:
    attempts = {t.pk: t.attempt for t in trials}
    rows = (StepResult.objects.filter(trial_id__in=list(attempts))
            .annotate(value=JsonPath("metrics", metric))
            .order_by("trial_id", "iteration")
            .values_list("trial_id", "attempt", "iteration", "value"))
    found: dict[int, list[tuple[int, float]]] = {}
    for trial_id, attempt, iteration, value in rows.iterator(chunk_size=5000):
        number = _float(value)
        if attempt == attempts[trial_id] and number is not None:
            found.setdefault(trial_id, []).append((iteration, number))
    return found


def thin(points: list[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    if len(points) <= limit:
        return points
    step = len(points) / limit
    kept = [points[int(i * step)] for i in range(limit - 1)]
    return [*kept, points[-1]]  # the latest point always shows


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
