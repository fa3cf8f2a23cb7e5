"""A Ray Tune search over an RL fine-tuning recipe: the workload `make demo` runs.

Ordinary Ray and Tune code: read it, copy it. Each trial trains a small policy (a
numpy matrix, so any laptop runs it) in steps of four phases: load a batch of prompts,
generate answers, score them with a judge, update the policy. It reports the reward
and how long each phase took (`timing_s/*`), which raywatch charts phase by phase.
Every trial asks Ray for one GPU; `make demo` tells Ray the machine has four (`num_gpus=4` needs no
hardware), and raywatch's simulated GPUs follow the Ray workers holding them.

ASHA stops the weaker learning rates early. Four things go wrong, as they do in real
searches, and raywatch shows each within two minutes:

- lr=20 (meant 2e-1, typed 2e1) diverges: the loss overflows to inf within a few steps
  and the trial raises (an errored trial);
- prompts="shard-07" is a small shard: its loader thread runs out of batches and
  ends quietly, and the training loop waits on the loader's queue for ever (a trial
  that hangs, alive and idle, holding its GPU);
- judge="api" scores with a hosted judge behind a rate limit: its burst covers the
  first steps, then every step waits ~30 s for quota while the GPU idles (a step-time
  regression, and an idle GPU during a step);
- the evaluator actor was sized for an 8-GPU machine: no node can ever hold it, so
  Ray leaves it pending for ever (infeasible demand).

    RAY_ADDRESS=HOST:PORT python demo/workload.py [--storage-path DIR]
"""

from __future__ import annotations

import argparse
import itertools
import math
import queue
import threading
import time
from collections.abc import Iterator

import numpy as np
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator

# Sized so that four trials at once keep about a third of one core busy (35 CPU ms a
# step, every 0.4 s), with the same reward curve as four times the size.
DIM, BATCH, MINIBATCH, SAMPLES, EXPLORE, MAX_STEPS = 128, 1024, 256, 8, 0.3, 150

# The configurations to run, in this order. Tune starts as many as there are free GPUs.
CONFIGS = [
    {"lr": 0.03, "judge": "local", "prompts": "all"},
    {"lr": 0.05, "judge": "api", "prompts": "all"},
    {"lr": 0.03, "judge": "local", "prompts": "shard-07"},
    {"lr": 20.0, "judge": "local", "prompts": "all"},
    {"lr": 0.01, "judge": "local", "prompts": "all"},
    {"lr": 0.1, "judge": "local", "prompts": "all"},
    {"lr": 0.003, "judge": "local", "prompts": "all"},
    {"lr": 0.001, "judge": "local", "prompts": "all"},
]


class PromptLoader:
    """Reads prompt batches in a background thread, a couple ahead of the training loop."""

    def __init__(self, shard: str, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.batches: Iterator[int] = itertools.count() if shard == "all" else iter(range(3))
        self.ready: queue.Queue[np.ndarray] = queue.Queue(maxsize=2)
        threading.Thread(target=self._fill, daemon=True).start()

    def _fill(self) -> None:
        for _ in self.batches:  # a small shard runs out here, and nobody tells next()
            time.sleep(0.4)  # reading from storage
            self.ready.put(self.rng.standard_normal((BATCH, DIM), dtype=np.float32))

    def next(self) -> np.ndarray:
        return self.ready.get()  # no timeout: waits as long as it takes


class LocalJudge:
    """A small reward model on this trial's own GPU: scores each answer by how close it
    is to the answer a reference model gives, and hands back that answer."""

    def __init__(self, reference: np.ndarray) -> None:
        self.reference = reference

    def score(self, prompts: np.ndarray, answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        preferred = prompts @ self.reference
        return np.exp(-np.mean((answers - preferred) ** 2, axis=-1)), preferred


class HostedJudge(LocalJudge):
    """The same judge behind a hosted API with a rate limit: a burst of calls, then
    one call every 60 / calls_per_minute seconds."""

    def __init__(self, reference: np.ndarray, calls_per_minute: float = 2, burst: int = 4
                 ) -> None:
        super().__init__(reference)
        self.interval = 60 / calls_per_minute
        self.burst = burst
        self.tokens, self.refilled = float(burst), time.monotonic()

    def score(self, prompts: np.ndarray, answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.refilled) / self.interval)
        self.refilled = now
        if self.tokens < 1:  # out of quota: wait until the next call is allowed
            time.sleep((1 - self.tokens) * self.interval)
            self.tokens, self.refilled = 1.0, time.monotonic()
        self.tokens -= 1
        time.sleep(0.3)  # the request itself
        return super().score(prompts, answers)


def train_policy(config: dict) -> None:
    """Each step: sample a few answers per prompt, have the judge score them, and move
    the policy towards the judge's preferred answers in minibatches."""
    rng = np.random.default_rng(7)
    reference = rng.standard_normal((DIM, DIM), dtype=np.float32) / math.sqrt(DIM)
    policy = np.zeros((DIM, DIM), dtype=np.float32)
    loader = PromptLoader(config["prompts"], seed=11)
    judge = HostedJudge(reference) if config["judge"] == "api" else LocalJudge(reference)
    for step in range(1, MAX_STEPS + 1):
        started = time.perf_counter()
        prompts = loader.next()
        loaded = time.perf_counter()
        noise = rng.standard_normal((SAMPLES, *prompts.shape), dtype=np.float32)
        answers = prompts @ policy + EXPLORE * noise
        generated = time.perf_counter()
        scores, preferred = judge.score(prompts, answers)
        judged = time.perf_counter()
        for rows in np.array_split(np.arange(BATCH), BATCH // MINIBATCH):
            error = prompts[rows] @ policy - preferred[rows]
            policy -= config["lr"] * (prompts[rows].T @ error) / len(rows)
        loss = float(np.mean(error**2))
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss is {loss} at step {step}: lr={config['lr']} diverges")
        print(f"step {step}: reward {scores.mean():.4f} loss {loss:.4f}", flush=True)
        tune.report({
            "reward_mean": float(scores.mean()),
            "loss": loss,
            "timing_s/load": loaded - started,
            "timing_s/generate": generated - loaded,
            "timing_s/judge": judged - generated,
            "timing_s/update": time.perf_counter() - judged,
        })


@ray.remote(num_gpus=8)
class Evaluator:
    """Scores the best policy on the held-out prompts, sharded over eight GPUs (its body
    is left out here: on a 4-GPU node it never starts)."""

    def evaluate(self, config: dict) -> float:
        raise NotImplementedError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage-path", default=None, help="default: ~/ray_results")
    args = parser.parse_args()
    ray.init()  # joins the cluster at RAY_ADDRESS
    evaluator = Evaluator.remote()  # started now, so that it is warm when the search ends
    tuner = tune.Tuner(
        tune.with_resources(train_policy, {"cpu": 1, "gpu": 1}),
        param_space={"lr": tune.loguniform(1e-3, 1.0), "judge": "local", "prompts": "all"},
        tune_config=tune.TuneConfig(
            metric="reward_mean", mode="max", num_samples=len(CONFIGS),
            search_alg=BasicVariantGenerator(points_to_evaluate=CONFIGS),
            scheduler=ASHAScheduler(max_t=MAX_STEPS, grace_period=5, reduction_factor=2),
        ),
        run_config=tune.RunConfig(name="raywatch-demo", storage_path=args.storage_path),
    )
    best = tuner.fit().get_best_result()
    print(f"best: {best.config} reward_mean {best.metrics['reward_mean']:.4f}", flush=True)
    print("evaluating on the held-out prompts…", flush=True)
    print(f"held-out reward: {ray.get(evaluator.evaluate.remote(best.config)):.4f}")


if __name__ == "__main__":
    main()
