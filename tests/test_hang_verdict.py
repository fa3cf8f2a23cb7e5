"""Hung or slow, from a few py-spy stacks of a call's process with its CPU and GPUs: an
unchanged stack with both idle is hung in the run's own frame, and says what it waits on
(a sleep, ray.get on another call, a collective, a data-loader queue, a lock, I/O); a
stack that moves, or a busy CPU or GPU, is slow and busy there, never hung."""

from __future__ import annotations

from collectors.pystack import (
    hang_verdict,
    lifecycle_of,
    parse_dump,
    rank_place,
    straggler_words,
    thread_running,
)
from collectors.records import RAYTRAIN
from dashboard.trials.runs import WORKING_IN

SITE = "/opt/venv/lib/python3.11/site-packages"


def dump(*frames: str, idle: bool = True, thread: str = "MainThread") -> str:
    """A py-spy 0.4 dump of a Ray actor worker: the call's thread, and Ray's own."""
    state = "idle" if idle else "active"
    lines = ["Process 4242: ray::AutoRewardManager.compute_reward",
             "Python v3.11.7 (/usr/bin/python3.11)", "",
             f'Thread 4242 ({state}): "{thread}"', *(f"    {f}" for f in frames),
             f"    actor_method_executor ({SITE}/ray/_private/function_manager.py:726)",
             f"    main_loop ({SITE}/ray/_private/worker.py:935)",
             'Thread 4300 (idle): "ray_import_thread"',
             f"    wait ({SITE}/../threading.py:324)",
             f"    _run ({SITE}/ray/_private/import_thread.py:70)"]
    return "\n".join(lines) + "\n"


SLEEPING = dump("AutoRewardManager.compute_reward (verl/workers/reward.py:42)")


def test_an_unchanged_idle_stack_is_hung_in_the_runs_own_frame() -> None:
    verdict = hang_verdict([SLEEPING] * 3, "compute_reward", cpu_percent=0.0, gpu_percent=None)
    assert verdict is not None and verdict.hung
    assert verdict.frame == "AutoRewardManager.compute_reward (verl/workers/reward.py:42)"
    assert verdict.waits_on == "a sleep or a native call"
    assert verdict.words.startswith("hung in AutoRewardManager.compute_reward (verl/workers/"
                                    "reward.py:42), waiting on a sleep or a native call")


def test_a_loop_that_runs_at_every_sample_is_busy_even_when_starved_of_cpu() -> None:
    """The same line in every stack, and CPU under the busy mark: a spinning loop on a
    machine whose cores are taken (18% of one), which py-spy sees running each time, is
    slow and busy, not hung; the same stack seen idle is hung."""
    spinning = dump("spin (tests/tune_scripts/search.py:56)", idle=False)
    verdict = hang_verdict([spinning] * 3, "spin", cpu_percent=18.0, gpu_percent=None)
    assert verdict is not None and not verdict.hung
    assert verdict.words == ("slow, busy in spin (tests/tune_scripts/search.py:56) (running at "
                             "every sample; 3 stacks, CPU 18%, no GPU)")
    once_idle = [spinning, spinning, spinning.replace("(active)", "(idle)", 1)]
    assert hang_verdict(once_idle, "spin", 18.0, None).hung  # type: ignore[union-attr]


def test_what_a_hung_call_waits_on_is_named() -> None:
    waits = {
        "ray.get on another call": (f"get ({SITE}/ray/_private/worker.py:2800)",
                                    f"wrapper ({SITE}/ray/_private/client_mode_hook.py:103)",
                                    "RayPPOTrainer.fit (verl/trainer/ray_trainer.py:1021)"),
        "a collective (NCCL, gloo or torch.distributed)": (
            f"barrier ({SITE}/torch/distributed/distributed_c10d.py:4160)",
            "train_step (train.py:88)"),
        "a data-loader queue": (
            "wait (/usr/lib/python3.11/threading.py:324)",
            "get (/usr/lib/python3.11/queue.py:180)",
            f"_try_get_data ({SITE}/torch/utils/data/dataloader.py:1131)",
            "train (train.py:40)"),
        "a queue": ("wait (/usr/lib/python3.11/threading.py:324)",
                    "Queue.get (/usr/lib/python3.11/queue.py:171)", "next_batch (train.py:12)"),
        "a lock or condition": ("wait (/usr/lib/python3.11/threading.py:324)",
                                "Judge.ask (judge.py:17)"),
        "I/O": ("recv_into (/usr/lib/python3.11/socket.py:706)", "Judge.ask (judge.py:19)"),
    }
    for kind, frames in waits.items():
        verdict = hang_verdict([dump(*frames)] * 2, "compute_reward", 0.0, 0.0)
        assert verdict is not None and verdict.hung, kind
        assert verdict.waits_on == kind, (kind, verdict)
        assert verdict.frame == frames[-1], (kind, verdict)


def test_a_moving_stack_or_a_busy_cpu_or_gpu_is_slow_not_hung() -> None:
    moving = [dump(f"score (verl/workers/reward.py:{line})", idle=False) for line in (50, 51, 50)]
    verdict = hang_verdict(moving, "compute_reward", 0.0, None)
    assert verdict is not None and not verdict.hung
    assert verdict.words.startswith("slow, busy in score (verl/workers/reward.py:50) "
                                    "(its stack moves")
    busy_cpu = hang_verdict([SLEEPING] * 3, "compute_reward", 97.0, None)
    assert busy_cpu is not None and not busy_cpu.hung and "CPU 97%" in busy_cpu.words
    busy_gpu = hang_verdict([SLEEPING] * 3, "compute_reward", 0.0, 88.0)
    assert busy_gpu is not None and not busy_gpu.hung and "GPU 88%" in busy_gpu.words
    # One stack cannot show that nothing moves; an unknown CPU cannot show it is idle.
    assert not hang_verdict([SLEEPING], "compute_reward", 0.0, None).hung  # type: ignore[union-attr]
    assert not hang_verdict([SLEEPING] * 3, "compute_reward", None, None).hung  # type: ignore[union-attr]
    assert hang_verdict([], "compute_reward", 0.0, None) is None


def test_the_calls_thread_is_found_by_its_method() -> None:
    text = dump("main_loop (x.py:1)") + 'Thread 4400 (idle): "Thread-7"\n' \
        "    AutoRewardManager.compute_reward (reward.py:9)\n"
    thread = thread_running(parse_dump(text), "compute_reward")
    assert thread is not None and thread.name == "Thread-7"
    assert thread_running(parse_dump(text), "no_such_method").name == "MainThread"  # type: ignore[union-attr]


def test_a_ray_train_rank_is_judged_by_its_training_thread() -> None:
    """A Ray Train rank runs the user's function in a thread its ThreadRunner starts from
    `_run_target` (dashboard.trials.runs.WORKING_IN), while the worker's main thread idles
    in Ray's loop: the verdict reads the training thread, hung in the user's frame that
    waits in the collective."""
    runner = f"{SITE}/ray/train/v2/_internal/execution/worker_group/thread_runner.py"
    rank = dump(f"barrier ({SITE}/torch/distributed/distributed_c10d.py:4160)",
                "train_func (train_scripts/gloo_run.py:31)",
                f"_run_target ({runner}:38)", thread="TrainingThread(train_func)")
    rank = rank.replace('Thread 4300 (idle): "ray_import_thread"',
                        f'Thread 4242 (idle): "MainThread"\n    main_loop ({SITE}/ray/_private/'
                        'worker.py:935)\nThread 4300 (idle): "ray_import_thread"')
    verdict = hang_verdict([rank] * 3, WORKING_IN[RAYTRAIN], 0.0, None)
    assert verdict is not None and verdict.hung
    assert verdict.frame == "train_func (train_scripts/gloo_run.py:31)"
    assert verdict.waits_on == "a collective (NCCL, gloo or torch.distributed)"


def test_installed_packages_are_told_from_the_runs_code_as_py_spy_names_them() -> None:
    """py-spy names a file by its path under its sys.path entry: an installed package's
    frames read "torch/distributed/…", "ray/train/v2/…", as the run's own read
    "train.py": the verdict names the run's frame and what the libraries wait on."""
    collective = dump("barrier (torch/distributed/distributed_c10d.py:4160)",
                      "wrapper (torch/distributed/c10d_logger.py:81)",
                      "train_step (train.py:88)")
    verdict = hang_verdict([collective] * 2, "train_step", 0.0, 0.0)
    assert verdict is not None and verdict.hung
    assert (verdict.frame, verdict.waits_on) == (
        "train_step (train.py:88)", "a collective (NCCL, gloo or torch.distributed)")
    report = dump("get_objects (ray/_private/worker.py:950)",
                  "TrainContext._sync_checkpoint_dir_name_across_ranks "
                  "(ray/train/v2/_internal/execution/context.py:254)",
                  "report (ray/train/v2/api/train_fn_utils.py:46)",
                  "train_loop (tests/train_scripts/gloo_run.py:44)")
    verdict = hang_verdict([report] * 2, "train_loop", 0.0, None)
    assert verdict is not None and verdict.waits_on == "ray.get on another call"
    assert verdict.frame == "train_loop (tests/train_scripts/gloo_run.py:44)"


def test_a_busy_trainer_validating_or_saving_says_so() -> None:
    """verl's and EasyR1's trainer validates in RayPPOTrainer._validate (its generation
    deep inside) and saves in _save_checkpoint; OpenRLHF evaluates and saves in
    save_logs_and_checkpoints: the step in progress is the framework's lifecycle."""
    validating = dump(f"generate ({SITE}/vllm/entrypoints/llm.py:465)",
                      "RayPPOTrainer._validate (verl/trainer/ppo/ray_trainer.py:612)",
                      "RayPPOTrainer.fit (verl/trainer/ppo/ray_trainer.py:1021)", idle=False)
    saving = dump(f"save ({SITE}/torch/serialization.py:943)",
                  "_save_checkpoint (verl/trainer/ppo/ray_trainer.py:870)", idle=False)
    evaluating = dump("PPOTrainer.evaluate (openrlhf/trainer/ppo_trainer.py:402)", idle=False)
    assert lifecycle_of(validating) == "validation"
    assert lifecycle_of(saving) == "a checkpoint save"
    assert lifecycle_of(evaluating) == "validation"
    training = dump("RayPPOTrainer.fit (verl/trainer/ppo/ray_trainer.py:1021)",
                    "compute_reward (verl/trainer/ppo/reward.py:88)", idle=False)
    assert lifecycle_of(training) == ""
    # A function that only contains the word is not one of them.
    assert lifecycle_of(dump("validate_config (verl/utils/config.py:10)")) == ""
    assert lifecycle_of("not a dump at all") == ""


def test_the_rank_outside_the_collective_is_named_with_where_each_rank_waits() -> None:
    def rank(*frames: str) -> list[str]:
        text = 'Thread 1 (idle): "MainThread"\n    main_loop (ray/_private/worker.py:9)\n' \
            'Thread 2 (idle): "Thread-1"\n' + "".join(f"    {f}\n" for f in frames)
        return [text, text]
    in_all_reduce = rank(f"all_reduce ({SITE}/torch/distributed/distributed_c10d.py:3252)",
                         f"wrapper ({SITE}/torch/distributed/c10d_logger.py:81)",
                         "train_loop (train.py:58)", f"_run_target ({SITE}/ray/train/x.py:5)")
    in_loader = rank("wait (/usr/lib/python3.11/threading.py:355)",
                     "Queue.get (/usr/lib/python3.11/queue.py:171)", "next_batch (train.py:48)",
                     "train_loop (train.py:56)", f"_run_target ({SITE}/ray/train/x.py:5)")
    in_report = rank(f"get ({SITE}/ray/_private/worker.py:2800)",
                     "report (ray/train/v2/_internal/execution/train_fn_utils.py:60)",
                     "train_loop (train.py:60)", f"_run_target ({SITE}/ray/train/x.py:5)")
    places = {0: rank_place(in_all_reduce, "_run_target"),
              1: rank_place(in_loader, "_run_target"),
              2: rank_place(in_all_reduce, "_run_target"),
              3: rank_place(in_report, "_run_target")}
    assert all(p is not None for p in places.values())
    found = {r: p for r, p in places.items() if p is not None}
    assert [r for r, p in found.items() if not p.in_collective] == [1]
    ranks, words = straggler_words(found, 8)
    assert ranks == [1]
    assert words == (
        "rank 1 of 8 not in the collective: rank 1 waits in Queue.get (/usr/lib/python3.11/"
        "queue.py:171) from next_batch (train.py:48); ranks 0, 2 wait in all_reduce ("
        f"{SITE}/torch/distributed/distributed_c10d.py:3252) from train_loop (train.py:58); "
        "rank 3 waits in report (ray/train/v2/_internal/execution/train_fn_utils.py:60) "
        "from train_loop (train.py:60)")
    # Every rank in a collective: said, no rank named; none in one: no straggler at all.
    every, said = straggler_words({0: found[0], 3: found[3]}, 2)
    assert every == [] and said.startswith("all 2 ranks sampled of 2 wait in a collective")
    assert straggler_words({1: found[1]}, 2) == ([], "")
    assert rank_place([], "_run_target") is None
