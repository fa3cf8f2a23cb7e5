"""Two verl runs as verl ships them, for raywatch's tests: each run's loop in a `TaskRunner`
actor of its own (verl/trainer/main_ppo.py), logging only to its console with verl's
default console logger (tests/rl_loggers.verl_console_line: `step:N - key:value`), a
validation line at step 0 first (`val_before_train`, on by default), and the reward
computed inside the trainer (verl's default, `launch_reward_fn_async: false`). Nothing
is configured for raywatch: no log dir, no file logger.

- "healthy": a first step of FIRST_S seconds of busy work (a long first rollout), then
  steps of STEP_S;
- "hung": its first step's reward asks a reward server that accepts and never answers,
  and waits on the socket for ever;
- "rollout": its first step waits in `ray.get` on its rollout worker's call, FIRST_S of
  busy work (a long first generation);
- "reward_call": its first step waits in `ray.get` on a reward actor's call
  (`RewardManager.compute_reward`, as EasyR1's and verl's async reward run) that asks a
  server which never answers;
- "unplaceable": before any step it asks Ray for a placement group for its worker group
  (verl's ResourcePoolManager, 8 GPUs a node) that no node can ever give, and waits on it
  (ray.get(pg.ready()), as verl's and OpenRLHF's launchers do), printing nothing;
- "straggler": its rollout worker group is two `WorkerDict` actors named as verl names
  them (`WorkerDict_0:0`, `WorkerDict_0:1`: RayWorkerGroup's `{prefix}{class}_{pg index}:
  {local rank}`) in one gloo process group; each step's rollout is a call to each that
  all-reduces its batch. At step 1 rank 1's data queue never yields, so rank 0 waits in
  all_reduce for it and the trainer waits in ray.get on both;
- "crash": at step CRASH_AT its rollout worker (a `WorkerDict`, as verl's fused worker
  class shows in Ray) runs out of GPU memory and raises; the trainer's `ray.get` raises
  in turn (the cascade), and the driver, started by hand, exits;
- "segfault": the same, but its rollout worker's process dies of SIGSEGV (a native
  kernel reading address 0): Ray says only that the worker died of a SYSTEM_ERROR.

Each actor writes its pid to MARKS/<name>.pid first; the hung one MARKS/hung.at (a
time.time()) as it starts waiting.

    python -m tests.tune_scripts.verl_console_runs GCS_ADDRESS MARKS STEPS [NAME ...]
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "token")

import ray
from ray.util.placement_group import placement_group

from tests.rl_loggers import verl_console_line, verl_step

FIRST_S = 45.0  # past raywatch's first look at a silent run (30 s): judged busy
STEP_S = 1.0
CRASH_AT = 3
OOM = "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.15 GiB total capacity)"


def busy(seconds: float) -> None:
    """Work, as a rollout's: the CPU busy in this frame the whole time."""
    end = time.monotonic() + seconds
    total = 0
    while time.monotonic() < end:
        total += sum(i * i for i in range(1000))


def compute_reward(marks: Path) -> float:
    """A reward server that took the connection and never answers: blocked in recv."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    (marks / "hung.at").write_text(str(time.time()))
    client.recv(1)  # never answered
    return 0.0


class WorkerDict:
    """verl's fused worker class as Ray shows it; with a rank, one of a rollout worker
    group's ranks in a gloo process group."""

    def __init__(self, rank: int | None = None, world: int = 0, address: str = "") -> None:
        self.rank = rank
        if rank is not None:
            import torch.distributed as dist

            dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)

    def actor_rollout_generate_sequences(self, step: int, seconds: float = 0.0,
                                         segfault: bool = False) -> float:
        if segfault and step >= CRASH_AT:
            import ctypes

            ctypes.string_at(0)  # SIGSEGV, in native code
        if self.rank is not None:
            import torch.distributed as dist

            batch = self.next_batch(step)
            dist.all_reduce(batch)
            return float(batch.item())
        if step >= CRASH_AT and not seconds:
            raise RuntimeError(OOM)
        busy(seconds)
        return step

    def next_batch(self, step: int):  # type: ignore[no-untyped-def]
        import torch

        if step == 1 and self.rank == 1:
            queue.Queue().get()  # its data never comes
        return torch.tensor([float(step)])


class RewardManager:
    def compute_reward(self, marks: str) -> float:
        return compute_reward(Path(marks))


class TaskRunner:
    def run(self, marks: str, name: str, steps: int) -> int:
        where = Path(marks)
        (where / f"{name}.pid").write_text(str(os.getpid()))
        if name == "unplaceable":
            pool = placement_group([{"GPU": 8, "CPU": 1}], strategy="STRICT_PACK",
                                   name="global_pool_verl_group_0")
            ray.get(pool.ready())  # never placed
        worker = ray.remote(num_cpus=0)(WorkerDict).remote()
        if name == "straggler":
            port = socket.socket()
            port.bind(("127.0.0.1", 0))
            address = f"tcp://127.0.0.1:{port.getsockname()[1]}"
            port.close()
            group = ray.remote(num_cpus=0)(WorkerDict)
            ranks = [group.options(name=f"WorkerDict_0:{rank}").remote(rank, 2, address)
                     for rank in range(2)]
        print(verl_console_line({"val-core/gsm8k/reward/mean@1": 0.12}, 0), flush=True)
        for step in range(1, steps + 1):
            if name == "hung":
                compute_reward(where)
            if name in ("crash", "segfault"):
                ray.get(worker.actor_rollout_generate_sequences.remote(
                    step, segfault=name == "segfault"))
            if name == "rollout":
                ray.get(worker.actor_rollout_generate_sequences.remote(
                    step, FIRST_S if step == 1 else STEP_S))
            if name == "straggler":
                ray.get([r.actor_rollout_generate_sequences.remote(step) for r in ranks])
            if name == "reward_call":
                reward = ray.remote(num_cpus=0)(RewardManager).remote()
                ray.get(reward.compute_reward.remote(marks))
            if name in ("healthy", "hung"):
                busy(FIRST_S if step == 1 else STEP_S)
            if name in ("crash", "segfault"):  # steps long enough for Ray to list its trainer
                time.sleep(3 * STEP_S)
            print(verl_console_line(verl_step(step), step), flush=True)
        return steps


def main() -> None:
    address, marks, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    names = sys.argv[4:] or ["healthy", "hung"]
    ray.init(address=address, logging_level="ERROR")
    runner = ray.remote(num_cpus=0)(TaskRunner)
    runners = {name: runner.remote() for name in names}
    ray.get([r.run.remote(marks, name, steps) for name, r in runners.items()])


if __name__ == "__main__":
    main()
