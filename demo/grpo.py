"""An EasyR1-shaped GRPO run on a real Ray cluster, for `make demo` and raywatch's tests:
the actors, call names, loop and log file as EasyR1 writes them (docs/ray-facts.md,
"Running calls"), with the model work replaced by sleeps.

    python -m demo.grpo GCS_ADDRESS CHECKPOINT_DIR STEPS HANG_AT

`Runner.run` (verl/trainer/main.py) drives the steps of RayPPOTrainer.fit: generate on
the fused `WorkerDict` (methods prefixed with their role, `actor_rollout_ref_...`), start
the reward on the `AutoRewardManager` actor without waiting (EasyR1's `reward` timer
wraps only the `.remote()`), compute log-probs, then wait for the reward inside `adv`;
and write one nested line per step to CHECKPOINT_DIR/experiment_log.jsonl (truncated at
start, as EasyR1's FileLogger opens it). From step HANG_AT on (0: never) the reward call
sleeps for ever, CPU idle, as in EasyR1 issue #310.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "token")

import ray

GEN_S, REWARD_S, LOGPROB_S = 0.5, 3.0, 0.5


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
    """verl/workers/reward/function.py: the rule-based reward, a Ray actor of its own."""

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
    """verl/trainer/main.py's Runner: RayPPOTrainer.fit runs inside `run`."""

    def run(self, checkpoint_dir: str, steps: int, hang_at: int) -> int:
        worker = ray.remote(num_cpus=0)(WorkerDict).remote()
        reward_fn = ray.remote(num_cpus=0)(AutoRewardManager).remote(hang_at)
        val_reward_fn = ray.remote(num_cpus=0)(AutoRewardManager).remote(0)  # noqa: F841
        log = Path(checkpoint_dir) / "experiment_log.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")  # EasyR1's FileLogger: open(..., "w") at start
        for step in range(1, steps + 1):
            timing: dict[str, float] = {}
            started = time.monotonic()
            mark = time.monotonic()
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
            with log.open("a") as out:  # a line per step, opened and closed each time
                out.write(json.dumps({"step": step, "timing_s": timing,
                                      "perf": {"time_per_step": timing["step"]}}) + "\n")
        return steps


def main() -> None:
    address, checkpoint_dir, steps, hang_at = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5])
    ray.init(address=address, logging_level="ERROR")
    runner = ray.remote(num_cpus=0)(Runner).remote()
    ray.get(runner.run.remote(checkpoint_dir, steps, hang_at))


if __name__ == "__main__":
    main()
