"""`make demo`'s Ray Train run, as Ray ships it: a TorchTrainer of two ranks on CPU (gloo),
Train's state tracking off and nothing of raywatch's added to it. raywatch finds it from
Ray Train's own log of each rank (docs/trial-logs.md, "Ray Train V2 runs").

Each step a rank takes a batch from its loader, all-reduces it and reports, about once a
second. At step HANG_AT rank 1's loader never yields (a queue nothing fills) while rank
0 waits in all_reduce for it: the run hangs with every process alive and idle, and the
rank that holds it up is outside the collective.

    python -m demo.train GCS_ADDRESS NAME HANG_AT STORAGE_DIR
"""

from __future__ import annotations

import os
import queue
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ["RAY_TRAIN_ENABLE_STATE_TRACKING"] = "0"  # as Ray ships it

import ray
import ray.train
from ray.train.torch import TorchTrainer

STEP_S = 1.0


def next_batch(step: int, rank: int, hang_at: int):  # type: ignore[no-untyped-def]
    import torch

    if step == hang_at and rank == 1:
        queue.Queue().get()  # rank 1's loader: nothing ever comes
    return torch.tensor([float(step)])


def train_loop(config: dict) -> None:
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    for step in range(1, 100_000):
        batch = next_batch(step, rank, config["hang_at"])
        dist.all_reduce(batch)
        ray.train.report({"loss": 1.0 / step, "tokens": batch.item()})
        time.sleep(STEP_S)


def main(gcs_address: str, name: str, hang_at: int, storage_dir: str) -> None:
    ray.init(address=gcs_address, logging_level="ERROR")
    TorchTrainer(
        train_loop, train_loop_config={"hang_at": hang_at},
        # A sliver of a CPU each: the demo's search holds the cluster's CPUs.
        scaling_config=ray.train.ScalingConfig(num_workers=2,
                                               resources_per_worker={"CPU": 0.05}),
        run_config=ray.train.RunConfig(name=name, storage_path=storage_dir)).fit()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
