"""Recognising the JSONL files RL post-training frameworks' file loggers write, by their
first lines (docs/trial-logs.md, "Runs of RL frameworks"):

- verl (`verl/utils/tracking.py`, FileLogger): `{"step": N, "data": {flat metrics}}`, in
  `$VERL_FILE_LOGGER_PATH` or `${VERL_FILE_LOGGER_ROOT:-.}/{project}/{experiment}.jsonl`;
- EasyR1 (`verl/utils/logger/logger.py`, FileLogger): `{"step": N, "timing_s": {...},
  "actor": {...}, ...}`, nested (unflatten_dict), in `<save_checkpoint_path>/
  experiment_log.jsonl`. Its first line may be a validation before training
  (`{"step": 0, "val": {...}}`): the name or a later line with `timing_s` decides.

(A Ray Train run needs no logger: each rank's process writes Ray Train's own log,
collectors.consolelogs.read_train_log.)

Any other JSONL under a log root (a dataset, another program's log) is not a run. A file
is looked at through collectors.rootfiles, without following a link; one named as
EasyR1's (a run of its directory) that cannot be read (a link, a FIFO) is still that run,
so that its refusal is its problem. No Django, and nothing here imports collectors.tunelogs
(which imports collectors.logscan, which imports this)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from collectors.records import EASYR1, OPENRLHF, RAYTRAIN, TENSORBOARD, VERL, ResultLine
from collectors.rootfiles import Root, open_file

# The trainer actor's class per framework: the Ray actor that runs a run's training loop
# and prints its steps (docs/ray-facts.md): verl's TaskRunner (and its fully-async and
# one-step-off-policy runners), EasyR1's Runner, OpenRLHF's PPOTrainer (and its async
# trainer), Ray Train's controller (which prints no step: a Train run's steps are its
# ranks' reports, in Ray Train's own log of each rank).
TRAINERS: dict[str, tuple[str, ...]] = {
    VERL: ("TaskRunner", "FullyAsyncTaskRunner", "OneStepTaskRunner"), EASYR1: ("Runner",),
    OPENRLHF: ("PPOTrainer", "PPOTrainerAsync", "TrainingActor"),
    RAYTRAIN: ("TrainController",)}
CONSOLE_FRAMEWORKS = (VERL, EASYR1, OPENRLHF)  # whose trainers print their steps
# A Ray Train rank's process (ray/train/v2/_internal/execution/worker_group/worker.py):
# each writes Ray Train's own log of its reports (collectors.consolelogs.read_train_log).
RANK_WORKER = "RayTrainWorker"
# The frameworks whose runs are read from their processes' own Ray logs, on their nodes
# (collectors.agent.console_runs): the trainers' consoles, a Ray Train rank's log.
PROCESS_LOG_FRAMEWORKS = (*CONSOLE_FRAMEWORKS, RAYTRAIN)
TRAINER_CLASSES = frozenset(name for names in TRAINERS.values() for name in names)

SUFFIX = ".jsonl"
EASYR1_FILE = "experiment_log.jsonl"  # EasyR1's name; verl's is the experiment's
# The loggers whose file, of a fixed name, makes its directory a run (named after it).
DIR_RUN_FILES = {EASYR1: EASYR1_FILE}
NOT_A_RUN = ""  # recognise(): the file is some other program's
HEAD_BYTES = 1 << 20  # a first line longer than this is no logger's
HEAD_LINES = 3  # lines looked at before deciding a file is no run
STEP_TOTALS = ("timing_s/step", "train/timing/step_total")  # a step's whole time, by name
OPENRLHF_TIMING = "train/timing/"  # OpenRLHF's per-phase tags (ppo_trainer.py, v0.9.6+)


def recognise_file(path: str | Path, root: Root | None) -> str | None:
    """VERL or EASYR1 when the file's first lines are that logger's, NOT_A_RUN when they
    are not (or it cannot be read), None while that cannot be told yet: no complete line
    (a logger writes its first line after the first step) or only a validation line."""
    name = Path(path).name
    try:
        # Only the head is read here: a file over the cap is still recognised, and its
        # tail then refuses it as that run's problem.
        with open_file(path, root, 1 << 62) as handle:
            head = handle.read(HEAD_BYTES)
    except FileNotFoundError:
        return None
    except OSError:  # a link, a FIFO, outside the root, unreadable
        return dir_run_format(name) or NOT_A_RUN
    lines = head.split(b"\n")[:-1][:HEAD_LINES]  # complete lines only
    if not lines and len(head) >= HEAD_BYTES:
        return NOT_A_RUN
    return recognise(lines, name)


def recognise(lines: Sequence[bytes], name: str) -> str | None:
    """What recognise_file says of a file named `name` whose first complete lines these
    are."""
    for raw in lines:
        shape = _shape(raw, name)
        if shape is not None:
            return shape
    return NOT_A_RUN if len(lines) >= HEAD_LINES else None


def _shape(raw: bytes, name: str) -> str | None:
    """One line's verdict; None: a line either logger may write (a validation line)."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return NOT_A_RUN
    if not isinstance(obj, dict) or not _is_step(obj.get("step")):
        return NOT_A_RUN
    if set(obj) == {"step", "data"} and isinstance(obj["data"], dict):
        return VERL
    groups = [v for k, v in obj.items() if k != "step"]
    if not groups or not all(isinstance(v, dict) for v in groups):
        return NOT_A_RUN
    return EASYR1 if "timing_s" in obj or name == EASYR1_FILE else None


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def dir_run_format(file_name: str) -> str:
    """The logger whose file of this name makes its directory a run, or ""."""
    return next((f for f, name in DIR_RUN_FILES.items() if name == file_name), "")


def train_run_dir(run_name: str) -> str:
    """The directory the Train callback writes a run's log in, under its log dir: the
    run's name (RunConfig.name, which Ray Train names its own storage directory after),
    made a single safe path component. raywatch's run (Trial.trial_id) is this name, and
    a Train run listed by Ray's state API is matched to it through it."""
    name = run_name.replace("/", "_").replace("\x00", "").strip()[:255]
    return name if name.strip(".") else "_"


def refine(stored: str, said: str, results: Iterable[ResultLine]) -> str:
    """A trial's framework once `said` (what its reader says) and these new results are
    taken in: a TensorBoard run is OpenRLHF's once it logs OpenRLHF's timing tags, and
    stays so when later steps do not (they are written every logging_steps)."""
    if said == TENSORBOARD and stored != OPENRLHF and any(
            key.startswith(OPENRLHF_TIMING) for line in results for key in line.metrics):
        said = OPENRLHF
    if not said or (stored == OPENRLHF and said == TENSORBOARD):
        return stored
    return said


def step_seconds(metrics: dict[str, float | None]) -> float | None:
    """A step's whole time where the framework logs it as a metric."""
    for name in STEP_TOTALS:
        if (value := metrics.get(name)) is not None:
            return value
    return None


def console_trainer_framework(class_name: str) -> str:
    """The framework whose trainer prints its steps under this actor class name, or ""."""
    return next((f for f in CONSOLE_FRAMEWORKS if class_name in TRAINERS[f]), "")


# The modules a framework's run is started with (`python -m MODULE ...`, or the file of it:
# `python3 openrlhf/cli/train_ppo_ray.py`), as Ray records a job's entrypoint (a driver's
# whole command line, a submission's entrypoint): verl's verl/trainer/main_ppo.py,
# EasyR1's verl/trainer/main.py, OpenRLHF's openrlhf/cli/train_ppo_ray.py. OpenRLHF's
# driver makes and waits on its placement groups before its PPOTrainer exists.
ENTRY_MODULES = {VERL: ("verl.trainer.main_ppo",), EASYR1: ("verl.trainer.main",),
                 OPENRLHF: ("openrlhf.cli.train_ppo_ray",)}
ENTRYPOINT_CHARS = 4096  # an entrypoint is read this far, no further


def entrypoint_framework(entrypoint: str) -> str:
    """The framework whose run a job's entrypoint starts, or "". Only the program's own
    words count: Python's `-m MODULE`, or the script Python runs (or that runs itself);
    a module named in an argument, or a program of another's (a shell script), does not."""
    words = entrypoint[:ENTRYPOINT_CHARS].split()
    while words and (words[0] == "env" or "=" in words[0]):  # `env A=1 python ...`
        words = words[1:]
    if not words:
        return ""
    program = words[0].rsplit("/", 1)[-1]
    if program.endswith(".py"):
        return _framework_of(words[0][:-3].replace("/", "."))
    if not program.startswith("python"):
        return ""
    rest = iter(words[1:])
    for word in rest:
        if word == "-m":
            return _framework_of(next(rest, ""))
        if word in ("-W", "-X"):  # an option's own argument
            next(rest, "")
        elif not word.startswith("-"):
            return _framework_of(word[:-3].replace("/", ".")) if word.endswith(".py") else ""
    return ""


def _framework_of(module: str) -> str:
    for framework, modules in ENTRY_MODULES.items():
        if any(module == m or module.endswith("." + m) for m in modules):
            return framework
    return ""


def console_run_key(job_id: str, trainer: str, pid: int) -> tuple[str, str]:
    """(experiment, trial id) of the run whose steps a trainer actor prints: its Ray job,
    its class and pid. Made the same from Ray's listing of the actor (raywatch finds the
    run before it prints anything) and from its console on its node."""
    return job_run_name(job_id), f"{trainer} {pid}"[:255]


def job_run_name(job_id: str) -> str:
    """The experiment of a Ray job's RL run: `job <id>`, whether its run was found from
    its trainer or from the job itself, before the trainer started."""
    return f"job {job_id}"[:255]


def run_job_id(experiment: str) -> str:
    """The Ray job whose run an experiment of job_run_name's is; "" for any other."""
    return experiment[4:] if experiment.startswith("job ") else ""
