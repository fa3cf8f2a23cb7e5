"""A script someone started by hand on GPU 3 to try the policy, and forgot: it loaded its
weights and waits for prompts that never come. It is no part of Ray, so no Ray job will
ever end it: raywatch shows its GPU memory as orphaned, and an admin can kill it from
the GPU's page. `make demo` starts it as

    CUDA_VISIBLE_DEVICES=3 python -m demo.leftover
"""

from __future__ import annotations

import time

import numpy as np


def main() -> None:
    weights = np.ones(256 * 2**20 // 4, dtype=np.float32)  # 256 MiB of policy weights
    print(f"policy loaded ({weights.nbytes >> 20} MiB), waiting for prompts", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
