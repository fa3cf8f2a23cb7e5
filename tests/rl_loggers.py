"""The per-step loggers of RL post-training frameworks, writing their files the way each
framework's source does (docs/wip/rl-frameworks-facts.md; docs/trial-logs.md), for the
tests of raywatch's readers. No framework is installed: the writers are copied here,
their file handling (paths, open modes, line shapes) as in the source."""

from __future__ import annotations

import json
import numbers
import os
from pathlib import Path
from pprint import pformat
from typing import Any

import orjson


class VerlFileLogger:
    """verl/utils/tracking.py, FileLogger after v0.7.0: `{root}/{project}/{experiment}.jsonl`,
    opened "wb" unbuffered when the trainer starts (so truncated, resumes included), one
    `{"step": N, "data": {flat metrics}}` line per step, by orjson."""

    def __init__(self, root: Path, project: str, experiment: str) -> None:
        directory = root / project
        os.makedirs(directory, exist_ok=True)
        self.filepath = directory / f"{experiment}.jsonl"
        self.fp = open(self.filepath, "wb", buffering=0)  # noqa: SIM115 (kept open, as verl)

    def log(self, data: dict[str, Any], step: int) -> None:
        self.fp.write(orjson.dumps({"step": step, "data": data},
                                   option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")

    def finish(self) -> None:
        self.fp.close()


def verl_console_line(data: dict[str, Any], step: int) -> str:
    """verl's default console logger (verl/utils/logger/aggregate_logger.py, LocalLogger.log
    -> concat_dict_to_str, v0.5.0+): `step:N - key:value - ...`, each number by
    pprint.pformat, anything else left out; printed by the trainer (TaskRunner)."""
    output = [f"step:{step}"]
    for k, v in data.items():
        if isinstance(v, numbers.Number):
            output.append(f"{k}:{pformat(v)}")
    return " - ".join(output)


def unflatten_dict(data: dict[str, Any], sep: str = "/") -> dict[str, Any]:
    """EasyR1's verl/utils/py_functional.py: "timing_s/gen" -> {"timing_s": {"gen": ...}}."""
    unflattened: dict[str, Any] = {}
    for key, value in data.items():
        pieces = key.split(sep)
        pointer = unflattened
        for piece in pieces[:-1]:
            pointer = pointer.setdefault(piece, {})
        pointer[pieces[-1]] = value
    return unflattened


class EasyR1FileLogger:
    """EasyR1's verl/utils/logger/logger.py, FileLogger: in `save_checkpoint_path`
    (default checkpoints/{project}/{experiment}), experiment_config.json written and
    experiment_log.jsonl and generations.log truncated at start; each step's line
    appended (the file opened and closed each time), nested."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        path = config["trainer"]["save_checkpoint_path"]
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "experiment_config.json"), "w") as f:
            json.dump(config, f, indent=2)
        with open(os.path.join(path, "experiment_log.jsonl"), "w"):
            pass
        with open(os.path.join(path, "generations.log"), "w"):
            pass

    def log(self, data: dict[str, Any], step: int) -> None:
        path = self.config["trainer"]["save_checkpoint_path"]
        with open(os.path.join(path, "experiment_log.jsonl"), "a") as f:
            f.write(json.dumps({"step": step, **unflatten_dict(data)}) + "\n")


def easyr1_config(checkpoints: Path, project: str, experiment: str) -> dict[str, Any]:
    return {"trainer": {"project_name": project, "experiment_name": experiment,
                        "save_checkpoint_path": str(checkpoints / project / experiment),
                        "logger": ["file"]},
            "algorithm": {"adv_estimator": "grpo", "online_filtering": False}}


class OpenRLHFTensorboardLogger:
    """openrlhf/utils/logging_utils.py, TensorboardLogger: a SummaryWriter in
    `{tensorboard_dir}/{run_name}` (run_name defaults to ppo_%m%dT%H:%M), each train
    status as the scalar `train/{key}` at the global step (torch's add_scalar writes a
    simple_value, as the tensorboard package's writer here does)."""

    def __init__(self, tensorboard_dir: Path, run_name: str = "ppo_0813T19:25") -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        os.makedirs(tensorboard_dir, exist_ok=True)
        self.writer = EventFileWriter(os.path.join(tensorboard_dir, run_name))

    def log_train(self, global_step: int, logs: dict[str, float]) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        for key, value in logs.items():
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                tag=f"train/{key}", simple_value=value)])
            self.writer.add_event(event_pb2.Event(step=global_step, wall_time=1795280000.0
                                                  + global_step, summary=summary))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def verl_step(step: int) -> dict[str, float]:
    """What verl's RayPPOTrainer.fit logs a step (metric_utils: timing_s/*, perf/*)."""
    return {"timing_s/gen": 2.0, "timing_s/reward": 0.5, "timing_s/old_log_prob": 0.4,
            "timing_s/adv": 0.3, "timing_s/update_actor": 1.5, "timing_s/step": 4.8,
            "timing_per_token_ms/gen": 0.02, "critic/score/mean": 0.1 * step,
            "perf/throughput": 1000.0 + step}


def easyr1_step(step: int) -> dict[str, float]:
    """What EasyR1's RayPPOTrainer.fit logs a step, flat, before its logger nests it."""
    return {"timing_s/gen": 2.0, "timing_s/reward": 0.01, "timing_s/old": 0.4,
            "timing_s/adv": 3.0, "timing_s/update_actor": 1.5, "timing_s/step": 6.9,
            "actor/kl_loss": 0.001 * step, "reward/overall": 0.1 * step,
            "perf/time_per_step": 6.9}


def openrlhf_step(step: int) -> dict[str, float]:
    """What OpenRLHF's PPOTrainer logs a step (ppo_trainer.py, v0.9.6+)."""
    return {"timing/generation": 3.0, "timing/make_experience": 1.0, "timing/ppo_train": 2.0,
            "timing/broadcast": 0.5, "timing/step_total": 6.5, "policy_loss": 0.2,
            "reward": 0.1 * step}
