"""Runs of RL frameworks' file loggers, found and read by the shared format layer
(collectors.logscan, collectors.runlogs) that raywatch's reader and the node agent both
use: a JSONL file is a run by its lines, not its name; EasyR1's nested lines and verl's
flat ones name a metric alike; a logger's file found empty becomes a run at its first
line; another program's JSONL is no run and is not read again each poll; a restart that
truncates the file starts a new attempt; what the agent sends says each run's framework.
Files are written as each framework's source writes them (tests/rl_loggers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from collectors import runformats
from collectors.agent.trialwire import decode_trial_log
from collectors.logscan import LogScanner
from collectors.runlogs import tail_run_jsonl
from tests.rl_loggers import (
    EasyR1FileLogger,
    VerlFileLogger,
    easyr1_config,
    easyr1_step,
    verl_step,
)
from tests.test_agent_trial_log_collector import Node


def runs(scanner: LogScanner) -> dict[tuple[str, str], str]:
    """What a scan hands on: (experiment, run) -> framework."""
    return {d.key: d.framework for d in scanner.scan().trial_dirs}


def test_a_jsonl_is_a_run_by_its_lines_not_its_name(tmp_path: Path) -> None:
    verl = VerlFileLogger(tmp_path, "gsm8k", "qwen-grpo")
    verl.log({"val-core/acc": 0.2}, 0)  # val_before_train
    verl.log(verl_step(1), 1)
    # verl's line in a file named as EasyR1's: its lines say whose it is.
    named = tmp_path / "other" / "run" / "experiment_log.jsonl"
    named.parent.mkdir(parents=True)
    named.write_bytes(verl.filepath.read_bytes())
    easy = EasyR1FileLogger(easyr1_config(tmp_path / "checkpoints", "easy_r1", "demo"))
    easy.log({"val/reward_score": 0.3}, 0)  # its first line: a validation, no timing_s
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n')
    (data / "flat.jsonl").write_text('{"step": 1, "loss": 0.5}\n')  # a step, no logger's shape
    (data / "text.jsonl").write_text('{"step": "1", "data": {}}\n')
    (data / "broken.jsonl").write_text("not json\n")

    assert runs(LogScanner([tmp_path])) == {
        ("gsm8k", "qwen-grpo"): "verl", ("other", "run"): "verl", ("easy_r1", "demo"): "easyr1"}


def test_an_easyr1_shaped_file_of_another_name_waits_for_its_timing(tmp_path: Path) -> None:
    """A validation line alone could be either logger's: a file not named as EasyR1's is
    a run once a step's timing_s shows."""
    project = tmp_path / "easy_r1"
    project.mkdir()
    log = project / "nightly.jsonl"
    log.write_text(json.dumps({"step": 0, "val": {"reward_score": 0.3}}) + "\n")
    scanner = LogScanner([tmp_path])
    assert runs(scanner) == {}
    with log.open("a") as out:
        out.write(json.dumps({"step": 1, "timing_s": {"gen": 1.0}}) + "\n")
    assert runs(scanner) == {("easy_r1", "nightly"): "easyr1"}


def test_nested_and_flat_lines_name_a_metric_alike(tmp_path: Path) -> None:
    step = easyr1_step(3)
    verl = VerlFileLogger(tmp_path, "p", "verl")
    verl.log(step, 3)
    easy = EasyR1FileLogger(easyr1_config(tmp_path, "p", "easy"))
    easy.log(step, 3)
    nested = json.loads((tmp_path / "p" / "easy" / "experiment_log.jsonl").read_text())
    assert nested["timing_s"]["reward"] == 0.01  # EasyR1's line nests it

    flat = tail_run_jsonl(verl.filepath, None, "verl", "verl").results
    unnested = tail_run_jsonl(tmp_path / "p" / "easy" / "experiment_log.jsonl", None, "easy",
                              "easyr1").results
    assert [r.metrics for r in flat] == [r.metrics for r in unnested] == [step]
    assert {r.time_this_iter_s for r in (*flat, *unnested)} == {step["timing_s/step"]}
    assert [r.iteration for r in unnested] == [3]


def test_a_logger_file_found_empty_is_a_run_from_its_first_line(tmp_path: Path) -> None:
    scanner = LogScanner([tmp_path])
    verl = VerlFileLogger(tmp_path, "proj", "exp")  # opened at start, written after a step
    easy = EasyR1FileLogger(easyr1_config(tmp_path / "ckpt", "proj2", "exp2"))
    assert runs(scanner) == {}
    assert runs(scanner) == {}  # looked at again: still empty
    verl.log(verl_step(1), 1)
    easy.log(easyr1_step(1), 1)
    assert runs(scanner) == {("proj", "exp"): "verl", ("proj2", "exp2"): "easyr1"}
    found = scanner.trial_dir(tmp_path / "ckpt" / "proj2" / "exp2")
    assert found is not None and found.params_file and found.params_file.endswith(
        "experiment_config.json")  # the run's config, shown as its trial's


def test_another_programs_jsonl_is_looked_at_once(tmp_path: Path) -> None:
    data = tmp_path / "datasets"
    data.mkdir()
    for n in range(20):
        (data / f"shard-{n}.jsonl").write_text('{"prompt": "p", "answer": "a"}\n' * 100)
    scanner = LogScanner([tmp_path])
    looked = mock.Mock(wraps=runformats.recognise_file)
    with mock.patch("collectors.logscan.recognise_file", looked):
        assert runs(scanner) == {}
        assert looked.call_count == 20
        for _ in range(3):
            assert runs(scanner) == {}
        (data / "shard-20.jsonl").write_text('{"prompt": "p"}\n')  # the directory changed
        assert runs(scanner) == {}
    assert looked.call_count == 21  # the new one only


def test_the_agent_sends_runs_with_their_framework_and_a_restart_as_an_attempt(
        tmp_path: Path) -> None:
    node = Node(tmp_path)
    verl = VerlFileLogger(node.root, "gsm8k", "ppo")
    for step in (1, 2, 3):
        verl.log(verl_step(step), step)
    easy = EasyR1FileLogger(easyr1_config(node.root / "checkpoints", "easy_r1", "grpo"))
    easy.log(easyr1_step(1), 1)
    node.collector.poll()
    first = [decode_trial_log(r, "gpu-a") for r in node.sent()]
    steps = {(u.experiment, u.trial_id, u.framework, r.attempt, r.iteration)
             for u in first for r in u.results}
    assert steps == {("gsm8k", "ppo", "verl", 1, 1), ("gsm8k", "ppo", "verl", 1, 2),
                     ("gsm8k", "ppo", "verl", 1, 3), ("easy_r1", "grpo", "easyr1", 1, 1)}

    verl.finish()
    verl = VerlFileLogger(node.root, "gsm8k", "ppo")  # resumed from step 2's checkpoint
    verl.log(verl_step(3), 3)
    node.collector.poll()
    again = [decode_trial_log(r, "gpu-a") for r in node.sent()]
    assert [(r.attempt, r.iteration) for u in again for r in u.results] == [(2, 3)]


def test_a_ray_train_ranks_facts_cross_the_wire_and_nonsense_is_refused() -> None:
    from datetime import UTC, datetime

    from collectors.agent.trialwire import encode_trial_log
    from collectors.agent.wire import WireError
    from collectors.records import RAYTRAIN, TrialUpdate

    at = datetime(2026, 12, 7, 18, 0, tzinfo=UTC)
    update = TrialUpdate(experiment="job 02000000", experiment_dir="/tmp/ray/s/logs/train",
                         trial_id="sft", trainable="RayTrainWorker", directory="/x.log",
                         tensorboard=False, console=True, framework=RAYTRAIN, writer_pid=42,
                         rank=1, world_size=4, rank_step=7, rank_step_at=at)
    back = decode_trial_log(encode_trial_log(update, at), "gpu-b")
    assert (back.rank, back.world_size, back.rank_step, back.rank_step_at, back.writer_pid) \
        == (1, 4, 7, at, 42)
    assert back.experiment_dir == "gpu-b:/tmp/ray/s/logs/train"
    plain = decode_trial_log(encode_trial_log(replace_rank(update, None), at), "gpu-b")
    assert plain.rank is None and plain.world_size is None
    for bad in ({"rank": -1}, {"rank": "0"}, {"rank": 0, "world_size": 0},
                {"rank": 0, "step_at": "yesterday"}, "rank 0"):
        record = {**encode_trial_log(update, at), "rank": bad}
        with pytest.raises(WireError):
            decode_trial_log(record, "gpu-b")


def replace_rank(update, rank):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(update, rank=rank, world_size=None, rank_step=None, rank_step_at=None)
