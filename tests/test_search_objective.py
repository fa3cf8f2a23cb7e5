"""A search's metric and mode come from its own files (tuner.pkl, the experiment state),
read by the one reader that raywatch's collector and the node agent share, carried in
the agent's trial_log record, and kept on the experiment: a trial's best follows them."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.utils import timezone

from collectors.agent.cursors import CursorStore
from collectors.agent.spool import Spool
from collectors.agent.trial_logs import TrialLogCollector
from collectors.agent.trialwire import decode_trial_log, encode_trial_log
from collectors.agent.wire import TRIAL_LOG, WireError
from collectors.records import TrialUpdate
from collectors.tunelogs import TuneStates
from collectors.tunesearch import SearchObjective, read_tuner
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.serializers import trial_rows
from dashboard.trials.store import store_updates
from dashboard.trials.tasks import poll_trial_logs

TRIAL = "train_fn_ab12c_00000_0_lr=0.1_2026-11-21_16-30-01"
STATE = "experiment_state-2026-11-21_16-30-01.json"


@pytest.fixture(scope="module")
def tuner_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tuner.pkl as Ray 2.60's Tuner writes it when it starts (no cluster needed): one
    search names its objective in TuneConfig, the other only in its ASHA scheduler."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    where = tmp_path_factory.mktemp("tuners")

    def trainable(config: dict) -> None:
        pass

    tune.Tuner(trainable, tune_config=tune.TuneConfig(metric="reward_mean", mode="max"),
               run_config=tune.RunConfig(name="config", storage_path=str(where)))
    tune.Tuner(trainable, tune_config=tune.TuneConfig(
        scheduler=ASHAScheduler(metric="val_loss", mode="min")),
        run_config=tune.RunConfig(name="scheduler", storage_path=str(where)))
    return {name: where / name / "tuner.pkl" for name in ("config", "scheduler")}


def result_line(iteration: int, reward: float) -> str:
    return json.dumps({"training_iteration": iteration, "trial_id": "ab12c_00000", "pid": 100,
                       "timestamp": 1795280000 + iteration, "time_this_iter_s": 1.0,
                       "reward_mean": reward, "val_loss": 1.0 / iteration}) + "\n"


def write_search(exp_dir: Path, tuner: Path | None, runner_metric: str | None) -> None:
    """A trial of a search whose reward_mean goes 1, 5, 2; the experiment state names
    `runner_metric` as Tune's controller does (runner_data._metric)."""
    trial = exp_dir / TRIAL
    trial.mkdir(parents=True)
    (trial / "params.json").write_text('{"lr": 0.1}')
    (trial / "result.json").write_text(result_line(1, 1.0) + result_line(2, 5.0)
                                       + result_line(3, 2.0))
    state = {"trial_data": [[json.dumps({"trial_id": "ab12c_00000", "status": "RUNNING"}),
                             json.dumps({"num_failures": 0})]],
             "runner_data": {"_metric": runner_metric, "_iteration": 3}}
    (exp_dir / STATE).write_text(json.dumps(state))
    if tuner is not None:
        shutil.copy(tuner, exp_dir / "tuner.pkl")


def test_tuner_pkl_names_the_objective(tuner_files: dict[str, Path]) -> None:
    assert read_tuner(tuner_files["config"].parent) == SearchObjective("reward_mean", "max")
    assert read_tuner(tuner_files["scheduler"].parent) == SearchObjective("val_loss", "min")


class Boom:
    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))

    def __init__(self, marker: Path) -> None:
        self.marker = marker


def test_tuner_pkl_is_read_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    data = {"_tune_config": {"mode": "min", "metric": "loss"}, "evil": Boom(marker)}
    (tmp_path / "tuner.pkl").write_bytes(pickle.dumps(data, protocol=5))
    assert read_tuner(tmp_path) == SearchObjective("loss", "min")
    assert not marker.exists()
    (tmp_path / "tuner.pkl").write_bytes(pickle.dumps(data, protocol=5)[:40])  # cut short
    assert read_tuner(tmp_path) is None


def test_a_mode_said_earlier_is_followed_through_the_memo(tmp_path: Path) -> None:
    # Pickle writes a string seen before as a reference to it ("max" of a checkpoint
    # config first, the search's mode second).
    mode = "".join(["m", "ax"])
    data = {"checkpoint": {"checkpoint_score_order": mode},
            "_tune_config": {"mode": mode, "metric": "score"}}
    (tmp_path / "tuner.pkl").write_bytes(pickle.dumps(data, protocol=5))
    assert read_tuner(tmp_path) == SearchObjective("score", "max")


def test_the_live_copy_names_the_metric_alone(tmp_path: Path) -> None:
    write_search(tmp_path / "driver_artifacts", None, "reward_mean")
    states = TuneStates()
    assert states.objective(tmp_path / "driver_artifacts") == SearchObjective("reward_mean", None)
    write_search(tmp_path / "other", None, "_metric")  # Tune's placeholder: none named
    assert states.objective(tmp_path / "other") is None


def test_central_reader_keeps_the_objective_and_best_follows_mode(  # type: ignore[no-untyped-def]
    db: None, settings, tmp_path: Path, tuner_files: dict[str, Path]
) -> None:
    settings.LOG_DIRS = [str(tmp_path / "storage"), str(tmp_path / "staging")]
    write_search(tmp_path / "staging" / "s1" / "search" / "driver_artifacts", None,
                 "reward_mean")
    poll_trial_logs()
    experiment = Experiment.objects.get(name="search")
    assert (experiment.metric, experiment.mode) == ("reward_mean", "")  # mode not known yet
    write_search(tmp_path / "storage" / "search", tuner_files["config"], "reward_mean")
    poll_trial_logs()
    experiment.refresh_from_db()
    assert (experiment.metric, experiment.mode) == ("reward_mean", "max")
    trial = Trial.objects.select_related("experiment").get(trial_id="ab12c_00000")
    assert trial.metric_range["reward_mean"] == [1.0, 5.0]
    assert trial_rows([trial])[0]["best_value"] == 5.0  # the highest, not the last (2.0)


def test_agent_sends_the_objective_once_and_the_server_keeps_it(  # type: ignore[no-untyped-def]
    db: None, tmp_path: Path, tuner_files: dict[str, Path]
) -> None:
    root = tmp_path / "ray_results"
    write_search(root / "search", tuner_files["scheduler"], None)
    spool = Spool(tmp_path / "spool", 1 << 30)
    collector = TrialLogCollector(lambda: [root], spool,
                                  CursorStore(tmp_path / "spool" / "cursors.sqlite3"))

    def sent() -> list[dict]:
        collector.poll()
        batches = spool.oldest(10**6, 1 << 40)
        spool.remove([b["seq"] for b in batches])
        return [r for b in batches for r in b["records"] if r["kind"] == TRIAL_LOG]

    first = sent()
    assert [r["search"] for r in first if r["search"]] == [{"metric": "val_loss", "mode": "min"}]
    store_updates([decode_trial_log(r, "gpu-b") for r in first], timezone.now())
    experiment = Experiment.objects.get(name="search")
    assert (experiment.metric, experiment.mode) == ("val_loss", "min")
    trial = Trial.objects.select_related("experiment").get(trial_id="ab12c_00000")
    assert trial_rows([trial])[0]["best_value"] == pytest.approx(1 / 3)  # the lowest loss
    with (root / "search" / TRIAL / "result.json").open("a") as out:
        out.write(result_line(4, 0.0))
    assert all(r["search"] is None for r in sent())  # said once per trial dir


def test_the_record_field_is_checked() -> None:
    update = TrialUpdate(experiment="e", experiment_dir="/r/e", trial_id="t", trainable="",
                         directory="/r/e/t", tensorboard=False, search_metric="reward_mean",
                         search_mode="max")
    record = json.loads(json.dumps(encode_trial_log(update, datetime(2026, 11, 21, tzinfo=UTC))))
    decoded = decode_trial_log(record, "gpu-b")
    assert (decoded.search_metric, decoded.search_mode) == ("reward_mean", "max")
    for bad in ({"metric": "m", "mode": "up"}, {"metric": "x" * 201, "mode": None},
                {"metric": "", "mode": "max"}, "max"):
        with pytest.raises(WireError, match="search"):
            decode_trial_log({**record, "search": bad}, "gpu-b")
