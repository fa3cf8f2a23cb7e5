"""A real Ray Tune search whose trials misbehave on purpose, for raywatch's tests.

    python -m tests.tune_scripts.search GCS_ADDRESS STORAGE_DIR NAME SCENARIO

Each trial's `behaviour` (from its config) is one of:
  healthy  - steady steps with timing_s/gen and timing_s/reward phases
  hang     - reports a few steps, then sleeps for ever with its process alive
  slow     - the reward phase grows 30x for iterations 6-8, then recovers
  grown    - the reward phase grows 10x at iteration 16 and stays so for 50 steps,
             then recovers
  crash    - reports a few steps, then waits to be killed from outside
  stubborn - like hang, but ignores SIGTERM (only a forced kill ends it)
SCENARIO "mixed" runs one trial of each; "asha" runs an ASHA search that stops
trials early (all healthy); "terminate" runs hang, stubborn and two long healthy
trials; "retry" runs one hang trial that Tune retries once (max_failures=1) and a
healthy one; "grown" runs one grown trial.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler

STEP_S = 0.3


def trainable(config: dict) -> None:
    behaviour = config["behaviour"]
    if behaviour == "hang-once":  # a marker file says whether this is the first attempt
        marker = os.path.join(os.getcwd(), "attempted")
        behaviour = "healthy" if os.path.exists(marker) else "hang"
        open(marker, "w").close()
    for i in range(1, config.get("steps", 40) + 1):
        gen, reward = 0.1, 0.2
        if behaviour == "slow" and 6 <= i <= 8:
            reward = 6.0  # three slow steps: longer than a poll, so no poll can miss them
        if behaviour == "grown":
            reward = 1.0 if 16 <= i <= 65 else 0.1
        if behaviour == "hang" and i == 5:
            while True:
                time.sleep(1)
        if behaviour == "stubborn" and i == 5:
            # Tune runs this function in a thread, where signal.signal() is not allowed:
            # set the process-wide disposition through libc instead.
            ctypes.CDLL(None).signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        if behaviour == "crash" and i == 5:
            time.sleep(3600)  # the test kills this process
        time.sleep(gen + reward)
        tune.report({
            "score": i * config.get("lr", 1.0),
            "loss": 1.0 / i,
            "timing_s/gen": gen,
            "timing_s/reward": reward,
        })


def main() -> None:
    gcs, storage, name, scenario = sys.argv[1:5]
    ray.init(address=gcs, log_to_driver=False, configure_logging=False)
    resources = {"cpu": 0.25}
    max_failures = 0
    if scenario == "terminate":
        space = {"behaviour": tune.grid_search(["hang", "stubborn", "healthy", "healthy"]),
                 "steps": 120}
        scheduler = None
    elif scenario == "retry":
        # The retried attempt runs healthy: a hang only on the first attempt.
        space = {"behaviour": tune.grid_search(["hang-once", "healthy"]), "steps": 60}
        scheduler, max_failures = None, 1
    elif scenario == "grown":
        space = {"behaviour": "grown", "steps": 75}
        scheduler = None
    elif scenario == "mixed":
        space = {"behaviour": tune.grid_search(["healthy", "hang", "slow", "crash"]),
                 "steps": 40}
        scheduler = None
    else:
        space = {"behaviour": "healthy", "lr": tune.grid_search([3.0, 2.0, 1.0, 0.5, 0.2, 0.1]),
                 "steps": 12}
        scheduler = ASHAScheduler(metric="score", mode="max", grace_period=2, max_t=12,
                                  reduction_factor=2)
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        param_space=space,
        tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=6),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=max_failures)),
    )
    tuner.fit()
    print("search finished", flush=True)


if __name__ == "__main__":
    main()
