"""A real Ray Tune search whose trials misbehave on purpose, for raywatch's tests.

    python -m tests.tune_scripts.search GCS_ADDRESS STORAGE_DIR NAME SCENARIO

Each trial's `behaviour` (from its config) is one of:
  healthy  - steady steps with timing_s/gen and timing_s/reward phases
  hang     - reports a few steps, then sleeps for ever with its process alive
  slow     - the reward phase grows 30x for iterations 6-8, then recovers
  grown    - the reward phase grows 10x at iteration 16 and stays so for 25 steps,
             then recovers
  crash    - reports a few steps, then waits to be killed from outside
  stubborn - like hang, but ignores SIGTERM (only a forced kill ends it)
  spin     - reports a few steps, then spins on half a core without reporting (5
             minutes at most)
SCENARIO "mixed" runs one trial of each; "asha" runs an ASHA search that stops
trials early (all healthy); "terminate" runs hang, stubborn and two long healthy
trials; "retry" runs one hang trial that Tune retries once (max_failures=1) and a
healthy one; "grown" runs one grown trial; "stacks" runs a hang and a spin trial;
"quick" runs three short healthy trials; "objective" names its metric and mode
(reward_mean, max) and runs lr 0.5 and 2.0 healthy for 8 steps and lr 3.0 that hangs;
"hyperband" runs four healthy trials, the lower their lr the slower, that HyperBand pauses
and resumes (checkpointed),
Tune's state written as Tune ships it; "node_b" runs a hang and a long healthy trial
on the node with the `node_b` resource; "queue" runs three healthy trials of one CPU each,
so that on the test cluster's two CPUs the third waits for one of the first two to end.
STORAGE_DIR "-" keeps Tune's default storage (~/ray_results of the driver's node).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, HyperBandScheduler

STEP_S = 0.3
# A spinning trial computes on this share of a core: busy to raywatch, whose line is a
# quarter of one (collectors/pystack.py BUSY_PERCENT), in any window of a tenth of a
# second or more, and never more than a whole core gets on a loaded machine. The suite
# runs four of these beside everything else: spinning on half a core each saves ~50 CPU s.
SPIN_SHARE = 0.5


def spin(seconds: float) -> None:
    """Compute in a Python loop for `seconds`, on SPIN_SHARE of a core: it sleeps only
    while its CPU time is ahead of that share of the time it has spun."""
    started, cpu = time.monotonic(), time.process_time()
    while (spun := time.monotonic() - started) < seconds:
        if time.process_time() - cpu > SPIN_SHARE * spun:
            time.sleep(0.01)


def trainable(config: dict) -> None:
    behaviour = config["behaviour"]
    if behaviour == "hang-once":  # a marker file says whether this is the first attempt
        marker = os.path.join(os.getcwd(), "attempted")
        behaviour = "healthy" if os.path.exists(marker) else "hang"
        open(marker, "w").close()
    first = 1
    if config.get("checkpoint") and (saved := tune.get_checkpoint()):
        with saved.as_directory() as where:  # a paused trial resumes where it was
            first = int(Path(where, "step").read_text()) + 1
    for i in range(first, config.get("steps", 40) + 1):
        gen, reward = 0.1, 0.2
        if behaviour == "slow" and 6 <= i <= 8:
            reward = 6.0  # three slow steps: longer than a poll, so no poll can miss them
        if behaviour == "grown":
            reward = 1.0 if 16 <= i <= 40 else 0.1
        if behaviour == "hang" and i == 5:
            print(f"hanging at iteration {i}", flush=True)  # its worker's log: Ray's log API
            while True:
                time.sleep(1)
        if behaviour == "stubborn" and i == 5:
            # Tune runs this function in a thread, where signal.signal() is not allowed:
            # set the process-wide disposition through libc instead.
            ctypes.CDLL(None).signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        if behaviour == "spin" and i == 5:
            spin(300)
        if behaviour == "crash" and i == 5:
            time.sleep(3600)  # the test kills this process
        lr = config.get("lr", 1.0)
        time.sleep(gen + reward + config.get("slower", 0.0) / lr)
        print(f"iteration {i}: score {i * lr}", flush=True)
        with tempfile.TemporaryDirectory() as where:
            checkpoint = None
            if config.get("checkpoint"):
                Path(where, "step").write_text(str(i))
                checkpoint = tune.Checkpoint.from_directory(where)
            tune.report({
                "score": i * lr,
                "loss": 1.0 / i,
                # Rises to iteration 4, then falls: its best (max) is neither its last nor
                # its min.
                "reward_mean": lr * (i if i <= 4 else max(0, 8 - i)),
                "timing_s/gen": gen,
                "timing_s/reward": reward,
            }, checkpoint=checkpoint)


def main() -> None:
    gcs, storage, name, scenario = sys.argv[1:5]
    ray.init(address=gcs, log_to_driver=False, configure_logging=False)
    resources = {"cpu": 0.25}
    max_failures = 0
    objective: dict[str, str] = {}
    if scenario == "terminate":
        space = {"behaviour": tune.grid_search(["hang", "stubborn", "healthy", "healthy"]),
                 "steps": 120}
        scheduler = None
    elif scenario == "retry":
        # The retried attempt runs healthy: a hang only on the first attempt.
        space = {"behaviour": tune.grid_search(["hang-once", "healthy"]), "steps": 60}
        scheduler, max_failures = None, 1
    elif scenario == "grown":
        space = {"behaviour": "grown", "steps": 50}
        scheduler = None
    elif scenario == "node_b":
        space = {"behaviour": tune.grid_search(["hang", "healthy"]), "steps": 400}
        scheduler, resources = None, {"cpu": 0.25, "node_b": 0.01}
    elif scenario == "stacks":
        space = {"behaviour": tune.grid_search(["hang", "spin"]), "steps": 40}
        scheduler = None
    elif scenario == "restart":
        # Long enough to be running when the test restarts the cluster under it.
        space = {"behaviour": tune.grid_search(["healthy", "healthy"]), "steps": 1000}
        scheduler = None
    elif scenario == "queue":
        space = {"behaviour": "healthy", "lr": tune.grid_search([1.0, 0.5, 0.1]), "steps": 40}
        scheduler, resources = None, {"cpu": 1}
    elif scenario == "quick":
        space = {"behaviour": "healthy", "lr": tune.grid_search([1.0, 0.5, 0.1]), "steps": 6}
        scheduler = None
    elif scenario == "mixed":
        # 120 steps: the healthy trial still runs when a page opens on a busy machine
        # (nothing waits for the search to end; the tests stop it).
        space = {"behaviour": tune.grid_search(["healthy", "hang", "slow", "crash"]),
                 "steps": 120}
        scheduler = None
    elif scenario == "objective":
        # The search names its objective (TuneConfig metric/mode); the lr=3.0 trial hangs.
        space = {"lr": tune.grid_search([0.5, 2.0, 3.0]), "steps": 8,
                 "behaviour": tune.sample_from(
                     lambda spec: "hang" if spec.config.lr == 3.0 else "healthy")}
        scheduler, objective = None, {"metric": "reward_mean", "mode": "max"}
    elif scenario == "hyperband":
        # As Ray's hyperband_function_example: HyperBand pauses trials at each rung (their
        # actors end) and resumes them from their checkpoints; Tune writes its state as it
        # ships ("auto": every 10 s or more), so for seconds it still says RUNNING of a
        # trial whose process it ended.
        os.environ["TUNE_GLOBAL_CHECKPOINT_S"] = "auto"
        # The lower a trial's lr, the slower its steps: the quick ones wait paused at each
        # rung for the slow ones, seconds at a time.
        space = {"behaviour": "healthy", "checkpoint": True, "steps": 16, "slower": 0.5,
                 "lr": tune.grid_search([3.0, 2.0, 1.0, 0.5])}
        scheduler = HyperBandScheduler(metric="score", mode="max", max_t=16,
                                       reduction_factor=2)
    else:
        space = {"behaviour": "healthy", "lr": tune.grid_search([3.0, 2.0, 1.0, 0.5, 0.2, 0.1]),
                 "steps": 12}
        scheduler = ASHAScheduler(metric="score", mode="max", grace_period=2, max_t=12,
                                  reduction_factor=2)
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        param_space=space,
        tune_config=tune.TuneConfig(scheduler=scheduler, max_concurrent_trials=6, **objective),
        run_config=tune.RunConfig(name=name, storage_path=None if storage == "-" else storage,
                                  verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=max_failures)),
    )
    tuner.fit()
    print("search finished", flush=True)


if __name__ == "__main__":
    main()
