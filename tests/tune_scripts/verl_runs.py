"""Two verl-shaped runs at once on one Ray node, for raywatch's tests: each run's loop in a
`TaskRunner` actor of its own (verl/trainer/main_ppo.py), logging through verl's file
logger (tests/rl_loggers.VerlFileLogger: `{root}/{project}/{experiment}.jsonl`, kept
open, one flat line per step). Each actor writes its pid to PIDS_DIR/<experiment> first,
so a test knows which process writes which run.

    python -m tests.tune_scripts.verl_runs GCS_ADDRESS ROOT PIDS_DIR STEPS
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "token")

import ray

from tests.rl_loggers import VerlFileLogger

STEP_S = 1.0


class TaskRunner:
    def run(self, root: str, pids: str, experiment: str, steps: int) -> int:
        (Path(pids) / experiment).write_text(str(os.getpid()))
        logger = VerlFileLogger(Path(root), "verl_pair", experiment)
        for step in range(1, steps + 1):
            time.sleep(STEP_S)
            logger.log({"timing_s/gen": 0.4, "timing_s/update_actor": 0.5,
                        "timing_s/step": STEP_S, "critic/score/mean": step / steps}, step)
        logger.finish()
        return steps


def main() -> None:
    address, root, pids, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ray.init(address=address, logging_level="ERROR")
    runner = ray.remote(num_cpus=0)(TaskRunner)
    runners = [runner.remote() for _ in range(2)]
    ray.get([r.run.remote(root, pids, f"exp{i}", steps) for i, r in enumerate(runners)])


if __name__ == "__main__":
    main()
