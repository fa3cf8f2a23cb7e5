"""Upgrading keeps each stored trial's best: migration 0004 fills metric_range from the
results already in the database (best_value, the best of one guessed metric, goes)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("trials", "0003_trial_stack")]
AFTER = [("trials", "0005_remove_trial_best_value")]
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def migrate(targets: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_stored_results_fill_each_trials_metric_range() -> None:
    old = migrate(BEFORE)
    Experiment = old.get_model("trials", "Experiment")
    Trial = old.get_model("trials", "Trial")
    StepResult = old.get_model("trials", "StepResult")
    experiment = Experiment.objects.create(name="ppo")
    rewards = {"a_00000": [1.0, 5.0, 2.0], "a_00001": [-3.0, None], "a_00002": []}
    for tid, values in rewards.items():
        trial = Trial.objects.create(experiment=experiment, trial_id=tid, best_value=7.0)
        StepResult.objects.bulk_create([
            StepResult(trial=trial, iteration=i, ingested_at=NOW,
                       metrics={"reward_mean": v, "kl": 0.01 * i})
            for i, v in enumerate(values, start=1)])
    try:
        new = migrate(AFTER)
        ranges = dict(new.get_model("trials", "Trial").objects.values_list("trial_id",
                                                                         "metric_range"))
        assert ranges == {"a_00000": {"reward_mean": [1.0, 5.0], "kl": [0.01, 0.03]},
                          "a_00001": {"reward_mean": [-3.0, -3.0], "kl": [0.01, 0.02]},
                          "a_00002": {}}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
