"""A Python process's stack, as py-spy dumps it (`py-spy dump --pid N`), read on the
process's own node: by the node agent, or by raywatch for a process on its own host.

py-spy reads the process's memory through ptrace: it needs root, the process's user
(where the kernel allows it) or, in a container, SYS_PTRACE and the host's pids. When
it cannot, the dump says why in words an operator can act on. No Django.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 10.0
MAX_CHARS = 64_000  # a dump of a few hundred threads; more is cut, and says so
INSTALL = "pip install py-spy==0.4.3 (ray[default] ships it)"
NO_PTRACE = ("ptrace is not allowed: run the agent as root or as the process's user; in "
             "a container it needs SYS_PTRACE (docker: cap_add: [SYS_PTRACE]) and the "
             "host's pids (pid: host)")


@dataclass(frozen=True)
class StackDump:
    text: str | None  # py-spy's dump, when it was taken
    reason: str | None = None  # why it was not


def find_py_spy(configured: str | None = None) -> str | None:
    """The py-spy to run: the configured path, else the one beside this Python (a venv's
    bin is often not on PATH), else the one on PATH."""
    if configured:
        return configured
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def dump_stack(pid: int, py_spy: str | None = None, timeout_s: float = TIMEOUT_S,
               max_chars: int = MAX_CHARS) -> StackDump:
    exe = find_py_spy(py_spy)
    if exe is None:
        return StackDump(None, f"py-spy is not installed on this node: {INSTALL}")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return StackDump(None, f"py-spy was not found at {exe}: {INSTALL}")
    try:
        done = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, errors="replace", timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return StackDump(None, f"py-spy did not finish within {timeout_s:g} s")
    except OSError as exc:
        return StackDump(None, f"py-spy could not be run ({exe}): {exc.strerror}")
    if done.returncode != 0 or not done.stdout.strip():
        return StackDump(None, explain(done.stderr or done.stdout, pid))
    return StackDump(capped(done.stdout, max_chars))


def explain(said: str, pid: int) -> str:
    """py-spy's failure (its stderr), as the reason a stack was not taken."""
    lowered = said.lower()
    if "permission denied" in lowered or "operation not permitted" in lowered:
        return f"py-spy may not read process {pid}: {NO_PTRACE}"
    if "failed to find python version" in lowered:
        return f"process {pid} does not look like a Python process to py-spy"
    if "check that the process is running" in lowered or "no such process" in lowered:
        return f"process {pid} has ended"
    first = next((line.strip() for line in said.splitlines() if line.strip()), "")
    return f"py-spy failed on process {pid}: {first[:300] or 'no output'}"


def capped(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n… cut at {max_chars} of {len(text)} characters\n"


# --- reading a dump: which thread runs the call, and what it waits on ------------------------
@dataclass(frozen=True)
class DumpThread:
    name: str
    idle: bool | None  # py-spy's "(idle)" / "(active)"; None when it says neither
    frames: tuple[str, ...]  # innermost first, as py-spy prints them: "func (file.py:42)"


def parse_dump(text: str) -> list[DumpThread]:
    """py-spy dump's threads: a `Thread N (idle): "name"` line, then its frames, indented
    (a frame's `Arguments:`/`Locals:` lines, printed with --locals, are left out)."""
    threads: list[DumpThread] = []
    name, idle, frames = None, None, []
    for line in text.splitlines():
        if line.startswith("Thread "):
            if name is not None:
                threads.append(DumpThread(name, idle, tuple(frames)))
            quoted = line.split('"')
            name = quoted[1] if len(quoted) > 2 else line.split(":")[0]
            idle = True if "(idle)" in line else False if "(active" in line else None
            frames = []
        elif name is not None and line.startswith("    ") and not line.startswith("        ") \
                and line.strip() and not line.strip().endswith(":"):
            frames.append(line.strip())
    if name is not None:
        threads.append(DumpThread(name, idle, tuple(frames)))
    return threads


def thread_running(threads: list[DumpThread], function: str) -> DumpThread | None:
    """The thread whose stack holds `function` (the Ray call's method: `compute_reward`),
    else the main thread."""
    # py-spy names a method with its class where it can ("AutoRewardManager.compute_reward").
    named = (f"{function} (", f".{function} (")
    for thread in threads:
        if function and any(f.startswith(named[0]) or named[1] in f for f in thread.frames):
            return thread
    return next((t for t in threads if t.name == "MainThread"), threads[0] if threads else None)


RAY_GET = "ray.get on another call"  # followed to the call it waits for (gpus/detect.py)
# What a thread waits on, told by the frames it waits in (innermost first). Each: the
# kind, in words, and the parts of a frame (its function or file) that mean it.
WAITS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("a collective (NCCL, gloo or torch.distributed)",
     ("torch/distributed/", "nccl", "gloo", "all_reduce", "all_gather", "barrier (")),
    (RAY_GET, ("ray/_private/worker.py", "get_objects (", "ray/_raylet")),
    ("a data-loader queue", ("torch/utils/data/", "multiprocessing/queues.py")),
    ("a queue", ("(queue.py:", " queue.py:", "/queue.py:")),
    ("a lock or condition", ("threading.py", "acquire (", "wait (")),
    ("I/O", ("socket.py", "ssl.py", "selectors.py", "recv (", "read (", "select (")),
    ("a sleep", ("sleep (", "time.sleep")),
)


# A framework's own lifecycle, told by a function on the stack of a busy trainer: verl's
# and EasyR1's RayPPOTrainer._validate and _save_checkpoint, OpenRLHF's evaluate and
# save_logs_and_checkpoints (docs/ray-facts.md "A trainer's console").
LIFECYCLE = (("validation", re.compile(r"^(?:\w+\.)*_?validate \(")),
             ("validation", re.compile(r"^(?:\w+\.)*evaluate \(")),
             ("a checkpoint save",
              re.compile(r"^(?:\w+\.)*(?:_?save_checkpoint|save_logs_and_checkpoints) \(")))


def lifecycle_of(dumps: str) -> str:
    """What a trainer's stacks (py-spy dumps) say it is doing when it is the framework's
    lifecycle rather than a training step: "validation", "a checkpoint save", or ""."""
    for thread in parse_dump(dumps):
        for frame in thread.frames:
            for what, pattern in LIFECYCLE:
                if pattern.match(frame):
                    return what
    return ""


def wait_of(thread: DumpThread) -> tuple[str, str]:
    """(what it waits on, the frame of the process's own code that waits): the first kind
    named by the library frames that code called into (innermost first); with none, an
    idle thread's own frame is a sleep or a call into native code (py-spy shows no C
    frames by default)."""
    frames = thread.frames
    at = next((i for i, f in enumerate(frames) if not _library(f)), None)
    own = frames[at] if at is not None else (frames[0] if frames else "")
    called = frames[:at] if at is not None else frames
    for kind, marks in WAITS:
        if any(mark in f for f in called for mark in marks):
            return kind, own
    if thread.idle and at == 0:
        return "a sleep or a native call", own
    return "", own


# py-spy names a file by its path under the sys.path entry it came from: an installed
# package's frames read "ray/train/v2/…/context.py", "torch/distributed/…", as the run's
# own read "demo/grpo.py". These top-level packages are libraries the run waits in, never
# its own code (verl's, EasyR1's and OpenRLHF's are the run's: where it waits is theirs).
LIBRARIES = ("ray/", "torch/", "vllm/", "transformers/", "deepspeed/", "accelerate/",
             "numpy/", "asyncio/", "concurrent/", "multiprocessing/", "grpc/", "urllib3/",
             "requests/", "httpx/", "aiohttp/", "http/", "wandb/", "tensorboard/")


def _library(frame: str) -> bool:
    """A frame of Python's own library or of an installed package, not the run's code."""
    where = frame.rsplit("(", 1)[-1]
    return where.startswith(LIBRARIES) or any(part in where for part in (
        "site-packages/", "dist-packages/", "/lib/python3", "<frozen ", "ray/_private/",
        "ray/_raylet", "threading.py", "queue.py", "socket.py"))


# Busy: this share of a core (or of a GPU), for the verdict and for trial_stalled alike.
# A sleeping Ray worker's own threads (gRPC, metrics) take a few percent: Ray's reporter
# read 6 % for a trial hung in time.sleep, and 12-13 % for the same hang on a machine
# loaded by two test suites. Work holds a core (a Python loop, or a CUDA sync spinning),
# so a quarter of one is a safe line.
BUSY_PERCENT = 25.0


@dataclass(frozen=True)
class Verdict:
    hung: bool  # the same stack in every sample, CPU and GPUs idle
    frame: str  # where: the process's own frame that waits, or runs
    waits_on: str  # what it waits on, in words ("" when it computes)
    words: str  # the verdict as the incident says it


def hang_verdict(dumps: list[str], function: str, cpu_percent: float | None,
                 gpu_percent: float | None) -> Verdict | None:
    """Hung or slow, from stacks taken a few seconds apart: an unchanged stack of the
    thread that runs the call, with CPU and the GPUs it holds idle, is hung there; a
    stack that moves, or a busy CPU or GPU, is slow and busy there. None: no dump read."""
    threads = [thread_running(parse_dump(d), function) for d in dumps]
    seen = [t for t in threads if t is not None and t.frames]
    if not seen:
        return None
    last = seen[-1]
    waits_on, frame = wait_of(last)
    still = len(seen) >= 2 and all(t.frames == last.frames for t in seen)
    busy = []
    if cpu_percent is not None and cpu_percent >= BUSY_PERCENT:
        busy.append(f"CPU {cpu_percent:.0f}%")
    if gpu_percent is not None and gpu_percent >= BUSY_PERCENT:
        busy.append(f"GPU {gpu_percent:.0f}%")
    if still and not waits_on and all(t.idle is False for t in seen):
        # py-spy saw it run its own code at every sample (the OS had it running or ready
        # to run, not waiting): a loop that the machine starves of CPU is busy, not hung.
        busy.append("running at every sample")
    said = [f"CPU {cpu_percent:.0f}%" if cpu_percent is not None else "CPU unknown",
            f"GPU {gpu_percent:.0f}%" if gpu_percent is not None else "no GPU"]
    samples = f"{len(seen)} stacks"
    if still and not busy and cpu_percent is not None:
        on = f", waiting on {waits_on}" if waits_on else ""
        return Verdict(True, frame, waits_on,
                       f"hung in {frame}{on}: {samples} unchanged, {', '.join(said)}")
    why = "its stack moves" if not still else " and ".join(busy) or "CPU unknown"
    return Verdict(False, frame, waits_on if still else "",
                   f"slow, busy in {frame} ({why}; {samples}, {', '.join(said)})")


# --- ranks that wait on each other -------------------------------------------------------------
COLLECTIVE = WAITS[0][0]
# Where a rank that waits for the others stands: a torch.distributed collective (its
# function named in the frame), or Ray Train's own report, which waits for every rank
# (ray/train/v2/_internal/execution/train_fn_utils.py and the SynchronizationActor).
COLLECTIVE_CALLS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
                    "all_to_all", "reduce", "gather", "scatter", "send", "recv",
                    "monitored_barrier", "broadcast_from_rank_zero")


@dataclass(frozen=True)
class RankPlace:
    in_collective: bool
    where: str  # "all_reduce (torch/distributed/distributed_c10d.py:2806) from train_loop
    # (gloo_run.py:37)"


def rank_place(dumps: list[str], function: str) -> RankPlace | None:
    """Where one rank's working thread stands in its last dump: in a collective (or Ray
    Train's report barrier), waiting for the other ranks, or elsewhere (its own code, a
    queue, I/O); and the call it is in, from the rank's own frame. None: no dump read."""
    threads = [thread_running(parse_dump(d), function) for d in dumps]
    seen = [t for t in threads if t is not None and t.frames]
    if not seen:
        return None
    frames = seen[-1].frames
    own_at = next((i for i, f in enumerate(frames) if not _library(f)), None)
    own = frames[own_at] if own_at is not None else frames[-1]
    called = frames[:own_at] if own_at is not None else frames
    collective = next((f for f in called if _collective_frame(f)), None)
    if collective is not None:
        return RankPlace(True, f"{collective} from {own}")
    # The call its own code made (the outermost library frame), else its own frame.
    inner = called[-1] if called else ""
    return RankPlace(False, f"{inner} from {own}" if inner else own)


def _collective_frame(frame: str) -> bool:
    function = frame.split(" (", 1)[0].rsplit(".", 1)[-1]
    where = frame.rsplit("(", 1)[-1]
    if where.startswith("torch/distributed/") or "/torch/distributed/" in where:
        return function in COLLECTIVE_CALLS or function.startswith(COLLECTIVE_CALLS)
    return where.startswith("ray/train/") and function in ("report", "barrier",
                                                           "broadcast_from_rank_zero")


def straggler_words(places: dict[int, RankPlace], world_size: int) -> tuple[list[int], str]:
    """(the ranks not in a collective while others wait in one, the words that name them
    and where each stands). No straggler when no rank waits in a collective (the run's
    own verdict stands) or when every rank sampled does (they wait on a rank not sampled,
    or on mismatched collectives: said, with no rank named)."""
    waiting = {r: p for r, p in places.items() if p.in_collective}
    out = {r: p for r, p in places.items() if not p.in_collective}
    if not waiting:
        return [], ""
    if not out:
        return [], (f"all {len(waiting)} ranks sampled of {world_size} wait in a collective: "
                    + _grouped(waiting))
    ranks = sorted(out)
    named = ", ".join(str(r) for r in ranks)
    return ranks, (f"rank{'s' if len(ranks) > 1 else ''} {named} of {world_size} not in the "
                   f"collective: {_grouped(out)}; {_grouped(waiting)}")


def _grouped(places: dict[int, RankPlace]) -> str:
    """`rank 1 waits in get (queue.py:171) from train_loop (x.py:41)`; ranks at one place
    said together (`ranks 0, 2, 3 wait in all_reduce (...)`)."""
    by_place: dict[str, list[int]] = {}
    for rank in sorted(places):
        by_place.setdefault(places[rank].where, []).append(rank)
    parts = []
    for where, ranks in by_place.items():
        many = len(ranks) > 1
        parts.append(f"rank{'s' if many else ''} {', '.join(map(str, ranks))} "
                     f"wait{'' if many else 's'} in {where}")
    return "; ".join(parts)
