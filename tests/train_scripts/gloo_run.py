"""A real Ray Train V2 run on CPU whose ranks end up waiting on each other, for raywatch's
tests (tests/test_ray_train_runs.py).

    python -m tests.train_scripts.gloo_run GCS_ADDRESS LOG_DIR STORAGE_DIR NAME HANG_AT \
        [barrier|loader] [tracked|untracked]

A TorchTrainer of two workers (gloo) runs NAME: each step takes a batch, all-reduces it
and reports, a step about every half second. At step HANG_AT the ranks stop waiting on
each other, with every process alive and idle:
- barrier (the default): rank 1 enters torch.distributed.barrier() while rank 0 goes on
  to ray.train.report, which waits in Ray Train's own barrier for every rank;
- loader: rank 1's data loader never yields a batch (a queue.get that nothing fills)
  while rank 0 waits in all_reduce for it: rank 1 is the straggler, outside the
  collective.
Tracked (the default): Train's state tracking on in this driver's environment, where Ray
Train reads it, and the run also reported through raywatch's callback (collectors/
traincallback.py, writing under LOG_DIR). Untracked: as Ray ships it, nothing added:
the run is known only from Ray and Ray Train's own logs.
"""

from __future__ import annotations

import os
import queue
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ["RAY_TRAIN_ENABLE_STATE_TRACKING"] = "0" if "untracked" in sys.argv[7:] else "1"

import ray
import ray.train
from ray.train.torch import TorchTrainer

from collectors.traincallback import RaywatchCallback

STEP_S = 0.5
TRACKED = os.environ["RAY_TRAIN_ENABLE_STATE_TRACKING"] == "1"


def next_batch(step: int, rank: int, config: dict):  # type: ignore[no-untyped-def]
    import torch

    if config["stall"] == "loader" and step == config["hang_at"] and rank == 1:
        queue.Queue().get()  # rank 1's loader: nothing ever comes
    return torch.tensor([float(step)])


def train_loop(config: dict) -> None:
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    for step in range(1, 10_000):
        total = next_batch(step, rank, config)
        dist.all_reduce(total)
        if config["stall"] == "barrier" and step == config["hang_at"] and rank == 1:
            dist.barrier()  # rank 0 never joins: it waits in ray.train.report
        ray.train.report({"loss": 1.0 / step, "sum": total.item()})
        time.sleep(STEP_S)


def main(gcs_address: str, log_dir: str, storage_dir: str, name: str, hang_at: int,
         stall: str) -> None:
    ray.init(address=gcs_address)
    trainer = TorchTrainer(
        train_loop, train_loop_config={"hang_at": hang_at, "stall": stall},
        scaling_config=ray.train.ScalingConfig(num_workers=2,
                                               resources_per_worker={"CPU": 0.5}),
        run_config=ray.train.RunConfig(
            name=name, storage_path=storage_dir,
            callbacks=[RaywatchCallback(log_dir)] if TRACKED else []))
    trainer.fit()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
         sys.argv[6] if len(sys.argv) > 6 else "barrier")
