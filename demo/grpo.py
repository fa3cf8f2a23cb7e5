"""GRPO runs as RL frameworks ship them, on a real Ray cluster, for `make demo`: the
actors, call names, loop and console lines as each framework's own source writes them
(docs/ray-facts.md, "Running calls" and "A trainer's console"), with the model work
replaced by sleeps. Nothing is configured for raywatch: each run logs to its console
only (the frameworks' default loggers are console and W&B), validates before its first
step (`val_before_train`, on by default), and is found from Ray.

    python -m demo.grpo easyr1 GCS_ADDRESS STEPS HANG_AT [FILE_LOG_DIR]
    python -m demo.grpo verl GCS_ADDRESS STEPS HANG_AT

- easyr1: `Runner.run` (verl/trainer/main.py) drives the steps of RayPPOTrainer.fit:
  generate on the fused `WorkerDict` (methods prefixed with their role), start the reward
  on the `AutoRewardManager` actor without waiting (EasyR1's `reward` timer wraps only the
  `.remote()`), compute log-probs, then wait for the reward inside `adv`; each step
  printed by its ConsoleLogger (`Step N` and the metrics as YAML), and with FILE_LOG_DIR
  (EasyR1's `trainer.logger` with "file") written as its FileLogger does too: one nested
  line per step to FILE_LOG_DIR/experiment_log.jsonl, truncated at start. From step
  HANG_AT on the reward call sleeps for ever, CPU idle, as in EasyR1 issue #310.
- verl: `TaskRunner.run` (verl/trainer/main_ppo.py) drives the steps, and computes the
  reward inside the trainer (verl's default, `launch_reward_fn_async: false`); each step
  printed by its console logger (`step:N - key:value`). At step HANG_AT its reward asks
  a judge server that accepted the connection and never answers: the trainer waits in
  recv, no Ray call runs, and only its own stacks say where.
HANG_AT 0: never.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from numbers import Number
from pathlib import Path
from pprint import pformat
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "token")

import ray
import yaml

GEN_S, REWARD_S, LOGPROB_S = 0.5, 3.0, 0.5


def nested(data: dict[str, Any]) -> dict[str, Any]:
    """EasyR1's unflatten_dict (verl/utils/py_functional.py): "a/b" -> {"a": {"b": ...}}."""
    tree: dict[str, Any] = {}
    for key, value in data.items():
        *parents, leaf = key.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def easyr1_console(data: dict[str, Any], step: int) -> None:
    """EasyR1's ConsoleLogger.log (verl/utils/logger/logger.py): the step, then its
    metrics nested by "/" as yaml.dump(indent=2)."""
    print(f"Step {step}\n" + yaml.dump(nested(data), indent=2), flush=True)


def verl_console(data: dict[str, Any], step: int) -> None:
    """verl's LocalLogger.log (verl/utils/logger/aggregate_logger.py, v0.5.0+):
    `step:N - key:value - ...`, numbers only, each by pprint.pformat."""
    print(" - ".join([f"step:{step}", *(f"{k}:{pformat(v)}" for k, v in data.items()
                                        if isinstance(v, Number))]), flush=True)


class WorkerDict:
    """verl's create_colocated_worker_cls builds a class of this name whose methods are
    the roles' methods, prefixed with the role key."""

    def actor_rollout_ref_generate_sequences(self, step: int) -> list[int]:
        time.sleep(GEN_S)
        return list(range(8))

    def actor_rollout_ref_compute_log_probs(self, batch: list[int]) -> float:
        time.sleep(LOGPROB_S)
        return 0.0

    def actor_rollout_ref_update_actor(self, batch: list[int]) -> float:
        time.sleep(LOGPROB_S)
        return 0.0


class AutoRewardManager:
    """EasyR1's verl/workers/reward/function.py: the rule-based reward, a Ray actor of its
    own."""

    def __init__(self, hang_at: int) -> None:
        self.hang_at = hang_at

    def compute_reward(self, step: int, batch: list[int]) -> tuple[list[float], dict]:
        if self.hang_at and step >= self.hang_at:
            print(f"reward of step {step}: waiting on the judge", flush=True)
            while True:  # a judge that never answers: sleeping, CPU 0%
                time.sleep(1)
        time.sleep(REWARD_S)
        return [1.0] * len(batch), {"reward/score": 1.0}


class Runner:
    """EasyR1's verl/trainer/main.py Runner: RayPPOTrainer.fit runs inside `run`."""

    def run(self, steps: int, hang_at: int, file_log: str = "") -> int:
        worker = ray.remote(num_cpus=0)(WorkerDict).remote()
        reward_fn = ray.remote(num_cpus=0)(AutoRewardManager).remote(hang_at)
        log = Path(file_log) / "experiment_log.jsonl" if file_log else None
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("")  # EasyR1's FileLogger: open(..., "w") at start
        easyr1_console({"val/reward_score": 0.12, "val/accuracy": 0.1}, 0)  # val_before_train
        for step in range(1, steps + 1):
            timing: dict[str, float] = {}
            started = mark = time.monotonic()
            batch = ray.get(worker.actor_rollout_ref_generate_sequences.remote(step))
            timing["gen"], mark = time.monotonic() - mark, time.monotonic()
            reward_ref = reward_fn.compute_reward.remote(step, batch)
            timing["reward"], mark = time.monotonic() - mark, time.monotonic()
            ray.get(worker.actor_rollout_ref_compute_log_probs.remote(batch))
            timing["old"], mark = time.monotonic() - mark, time.monotonic()
            ray.get(reward_ref)  # EasyR1 waits for the reward inside `adv`
            timing["adv"], mark = time.monotonic() - mark, time.monotonic()
            ray.get(worker.actor_rollout_ref_update_actor.remote(batch))
            timing["update_actor"] = time.monotonic() - mark
            timing["step"] = time.monotonic() - started
            metrics = {**{f"timing_s/{k}": v for k, v in timing.items()},
                       "reward/overall": 0.1 * step, "perf/time_per_step": timing["step"]}
            easyr1_console(metrics, step)
            if log is not None:  # a line per step, opened and closed each time
                with log.open("a") as out:
                    out.write(json.dumps({"step": step, **nested(metrics)}) + "\n")
        return steps


def ask_the_judge() -> float:
    """A reward that asks a judge server which took the connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    client.recv(1)  # never answered
    return 0.0


class TaskRunner:
    """verl's verl/trainer/main_ppo.py TaskRunner: RayPPOTrainer.fit runs inside `run`,
    the reward computed in this process (compute_reward(batch, self.reward_fn))."""

    def run(self, steps: int, hang_at: int) -> int:
        worker = ray.remote(num_cpus=0)(WorkerDict).remote()
        verl_console({"val-core/gsm8k/reward/mean@1": 0.12}, 0)  # val_before_train
        for step in range(1, steps + 1):
            timing: dict[str, float] = {}
            started = mark = time.monotonic()
            batch = ray.get(worker.actor_rollout_ref_generate_sequences.remote(step))
            timing["gen"], mark = time.monotonic() - mark, time.monotonic()
            if hang_at and step >= hang_at:
                ask_the_judge()
            time.sleep(REWARD_S / 10)
            timing["reward"], mark = time.monotonic() - mark, time.monotonic()
            ray.get(worker.actor_rollout_ref_update_actor.remote(batch))
            timing["update_actor"] = time.monotonic() - mark
            timing["step"] = time.monotonic() - started
            verl_console({**{f"timing_s/{k}": v for k, v in timing.items()},
                          "critic/score/mean": 0.1 * step}, step)
        return steps


TRAINERS = {"easyr1": Runner, "verl": TaskRunner}


def main() -> None:
    framework, address = sys.argv[1], sys.argv[2]
    steps, hang_at = map(int, sys.argv[3:5])
    ray.init(address=address, logging_level="ERROR")
    trainer = ray.remote(num_cpus=0)(TRAINERS[framework]).remote()
    ray.get(trainer.run.remote(steps, hang_at, *sys.argv[5:6]))


if __name__ == "__main__":
    main()
