"""A real Ray Train V2 run on CPU whose ranks end up waiting on each other, for raywatch's
tests (tests/test_ray_train_runs.py).

    python -m tests.train_scripts.gloo_run GCS_ADDRESS STORAGE_DIR NAME HANG_AT

A TorchTrainer of two workers (gloo) runs NAME as Ray ships it (no callback, nothing of
raywatch's): each step all-reduces a tensor and reports it, a step about every half
second. At step HANG_AT rank 1 enters torch.distributed.barrier()
while rank 0 goes on to ray.train.report, which waits in Ray Train's own barrier for
every rank: neither ever comes, and the run hangs with every process alive and idle.
Train's state tracking is on in this driver's environment, where Ray Train reads it.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ["RAY_TRAIN_ENABLE_STATE_TRACKING"] = "1"

import ray
import ray.train
from ray.train.torch import TorchTrainer

STEP_S = 0.5


def train_loop(config: dict) -> None:
    import torch
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    for step in range(1, 10_000):
        total = torch.tensor([float(step)])
        dist.all_reduce(total)
        if step == config["hang_at"] and rank == 1:
            dist.barrier()  # rank 0 never joins: it waits in ray.train.report
        ray.train.report({"loss": 1.0 / step, "sum": total.item()})
        time.sleep(STEP_S)


def main(gcs_address: str, storage_dir: str, name: str, hang_at: int) -> None:
    ray.init(address=gcs_address)
    trainer = TorchTrainer(
        train_loop, train_loop_config={"hang_at": hang_at},
        scaling_config=ray.train.ScalingConfig(num_workers=2,
                                               resources_per_worker={"CPU": 0.5}),
        run_config=ray.train.RunConfig(name=name, storage_path=storage_dir))
    trainer.fit()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
