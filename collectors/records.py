"""Typed records that collectors hand to the ingest layer. A value a source
does not report is None, never -1 or 0."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from collectors.rootfiles import Root


@dataclass(frozen=True)
class ResourceUse:
    """One Ray resource on one node: what exists and what is taken."""

    total: float
    used: float | None


@dataclass(frozen=True)
class RaySession:
    """Which start of a Ray head answers: Ray names each session
    (session_<date>_<time>_<pid>); a restarted head is a new session, with new node ids,
    actor ids, pids and Tune trials. From the dashboard's GET /api/version."""

    session_name: str
    ray_version: str | None = None
    ray_commit: str | None = None


@dataclass(frozen=True)
class NodeRecord:
    node_id: str
    node_ip: str
    hostname: str | None
    is_head: bool
    state: str  # "ALIVE" or "DEAD", as Ray says
    state_message: str | None
    started_at: datetime | None
    ended_at: datetime | None
    resources: dict[str, ResourceUse] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    cpu_percent: float | None = None
    mem_total_bytes: int | None = None
    mem_used_bytes: int | None = None
    object_store_used_bytes: int | None = None
    object_store_total_bytes: int | None = None
    object_store_spilled_bytes: int | None = None  # total spilled to disk since start
    object_store_restored_bytes: int | None = None


@dataclass(frozen=True)
class GpuProcessRecord:
    """A process NVML lists on a GPU."""

    pid: int
    used_memory_bytes: int | None  # None when NVML does not say (e.g. under MIG)
    type: str = "compute"  # "compute" or "graphics"
    ancestors: tuple[int, ...] = ()  # parent pids, nearest first (read by the agent)


@dataclass(frozen=True)
class GpuSampleRecord:
    """One NVML reading of one GPU at one instant, on the node `node` (the agent's
    node name). Every field NVML does not support on this device is None."""

    node: str
    gpu_index: int
    uuid: str
    at: datetime
    name: str | None = None
    utilization_gpu: float | None = None  # percent
    utilization_memory: float | None = None  # percent of time memory was read or written
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    # Active clock throttle reasons by name ("hw_thermal_slowdown", "sw_power_cap", ...);
    # () when none is active, None when NVML cannot tell.
    throttle_reasons: tuple[str, ...] | None = None
    ecc_corrected: int | None = None  # volatile counts since the driver loaded
    ecc_uncorrected: int | None = None
    mig_mode: bool | None = None
    # None when NVML could not list the processes; () when there are none.
    processes: tuple[GpuProcessRecord, ...] | None = ()
    simulated: bool = False


@dataclass(frozen=True)
class GpuPoll:
    """Everything one NVML poll of one node read. `problems` are partial failures
    (a GPU that fell off the bus, a field that errored), said in words."""

    node: str
    at: datetime
    gpus: tuple[GpuSampleRecord, ...]
    driver_version: str | None = None
    problems: tuple[str, ...] = ()
    simulated: bool = False


@dataclass(frozen=True)
class ActorRecord:
    """A Ray actor that is not DEAD (alive, pending, restarting)."""

    actor_id: str
    state: str
    pid: int | None  # None while pending: Ray reports 0 there
    node_id: str | None
    class_name: str
    repr_name: str
    name: str
    job_id: str | None
    placement_group_id: str | None
    required_resources: dict[str, float] = field(default_factory=dict)
    start_time: datetime | None = None


@dataclass(frozen=True)
class CallRecord:
    """A task or actor call Ray lists as RUNNING (GET /api/v0/tasks): its name is Ray's
    "Class.method" for an actor call (`AutoRewardManager.compute_reward`), the function's
    name for a task; a call blocked in ray.get is RUNNING too (docs/ray-facts.md)."""

    task_id: str
    attempt: int
    name: str
    kind: str  # ACTOR_TASK, NORMAL_TASK, ACTOR_CREATION_TASK
    job_id: str | None
    actor_id: str | None
    node_id: str | None
    pid: int | None
    # The call that made it (Ray's parent_task_id): which trainer's step a call belongs to.
    parent_task_id: str | None = None


@dataclass(frozen=True)
class ActorDeathRecord:
    """Why Ray says an actor died (GET /api/v0/actors with detail: its death_cause).
    `reason` is Ray's (WORKER_DIED, RAY_KILL, OWNER_DIED, NODE_DIED, OUT_OF_SCOPE,
    REF_DELETED, OUT_OF_MEMORY for the memory monitor, UNSCHEDULABLE, CREATION_FAILED,
    RUNTIME_ENV_FAILED) and `exit_type` the worker's (INTENDED_USER_EXIT, SYSTEM_ERROR,
    ...) when Ray says it; `on_purpose`: its owner or a user ended it (ray.kill, exit_actor,
    __ray_terminate__, the last handle dropped), as Tune ends a trial it pauses."""

    actor_id: str
    reason: str
    exit_type: str
    message: str
    on_purpose: bool


@dataclass(frozen=True)
class FailedCallRecord:
    """A task or actor call Ray lists as FAILED, with why (GET /api/v0/tasks with detail):
    its error type (TASK_EXECUTION_EXCEPTION for a raised exception, ACTOR_DIED,
    OUT_OF_MEMORY, WORKER_DIED, ...) and message (a raised exception's traceback)."""

    task_id: str
    attempt: int
    name: str
    job_id: str
    actor_id: str | None
    node_id: str | None
    pid: int | None
    error_type: str
    message: str
    failed_at: datetime | None  # its end time, as Ray says


@dataclass(frozen=True)
class JobRecord:
    """A Ray job: one driver, submitted through the Jobs API or started by hand."""

    job_id: str | None  # Ray's job id ("02000000"); None until a submitted job's driver starts
    submission_id: str | None  # the Jobs API id ("raysubmit_..."), None for a hand-started driver
    type: str  # "SUBMISSION" or "DRIVER"
    status: str  # PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED
    entrypoint: str
    message: str
    driver_pid: int | None
    driver_node_id: str | None
    driver_node_ip: str | None
    start_time: datetime | None
    end_time: datetime | None

    @property
    def key(self) -> str:
        return self.submission_id or self.job_id or ""


@dataclass(frozen=True)
class PlacementGroupRecord:
    placement_group_id: str
    name: str
    state: str  # PENDING, CREATED, REMOVED, RESCHEDULING
    strategy: str | None  # the state API does not say; known only while it waits
    bundles: tuple[dict[str, float], ...]
    creator_job_id: str | None
    scheduling_state: str | None  # Ray's stats.scheduling_state, e.g. "INFEASIBLE"
    created_at: datetime | None


@dataclass(frozen=True)
class DemandRecord:
    """Work Ray cannot place yet: a pending actor, a placement group, or a shape of
    pending tasks (Ray reports tasks by resource shape with a count)."""

    kind: str  # "actor", "placement_group" or "task"
    key: str  # actor id, placement group id, or the task shape ("CPU:1,GPU:1")
    name: str  # what a person recognises: class/repr name, pg name, task function
    bundles: tuple[dict[str, float], ...]  # one bundle for actors and tasks
    count: int = 1
    infeasible: bool | None = None  # as Ray says; None when Ray does not say
    job_id: str | None = None
    strategy: str | None = None  # placement groups only


@dataclass(frozen=True)
class Truncation:
    """A Ray list that Ray cut at its row limit and raywatch could not complete."""

    listing: str  # "actors", "workers", "nodes", "placement groups"
    ray_total: int | None  # Ray's `total`: every entry it holds, dead ones included
    got: int  # the rows raywatch did get (live ones, for a list filtered to them)

    def describe(self) -> str:
        held = f" of the {self.ray_total:,} Ray holds (dead included)" \
            if self.ray_total is not None else ""
        return (f"Ray truncated its {self.listing} list: raywatch got {self.got:,}{held}, "
                "not the rest")


@dataclass(frozen=True)
class WorkerRecord:
    """A live Ray worker process: a task or actor worker, or a driver."""

    worker_id: str
    node_id: str
    pid: int
    worker_type: str  # WORKER, DRIVER, SPILL_WORKER, RESTORE_WORKER
    job_id: str | None = None


@dataclass(frozen=True)
class ProcessFact:
    """One process on a node as its agent reads it: a Ray worker or a GPU process.
    `create_time` (seconds since the epoch, as psutil gives it) tells a reused pid apart."""

    pid: int
    create_time: float
    ppid: int | None
    title: str  # the command line's first word: Ray sets it to "ray::<Class>.<method>"
    state: str | None  # R, S, D, Z, T, I as in ps; None when it cannot be read
    cpu_percent: float | None  # since the previous reading; None on the first
    rss_bytes: int | None
    threads: int | None


@dataclass(frozen=True)
class TrainWorkerRecord:
    """One worker of a Ray Train V2 run's attempt, as Train's state API lists it: the
    process (a RayTrainWorker actor) that runs the training function of one rank."""

    rank: int  # the world rank
    local_rank: int | None
    actor_id: str
    node_id: str
    node_ip: str
    pid: int | None
    gpu_ids: tuple[int, ...]  # the GPUs Ray gave it, as Ray numbers them on its node
    state: str | None  # ALIVE or DEAD, as the dashboard read its actor; None: not said


@dataclass(frozen=True)
class TrainRunRecord:
    """A Ray Train V2 run, as Train's state API lists it (GET /api/train/v2/runs/v1):
    its status and the workers of its latest attempt."""

    run_id: str
    name: str  # RunConfig.name
    # INITIALIZING, SCHEDULING, RUNNING, RESTARTING, RESIZING; FINISHED, ERRORED, ABORTED
    status: str
    status_detail: str
    job_id: str
    controller_actor_id: str
    started_at: datetime | None
    ended_at: datetime | None
    attempts: int
    workers: tuple[TrainWorkerRecord, ...] = ()


# What wrote a trial's (or run's) files: Tune; verl's or EasyR1's file logger (JSONL);
# OpenRLHF (TensorBoard with its train/timing/* tags) or some other TensorBoard writer;
# a Ray Train run (its ranks' own Ray Train logs, collectors.consolelogs.read_train_log).
TUNE, TENSORBOARD, VERL, EASYR1, OPENRLHF = "tune", "tensorboard", "verl", "easyr1", "openrlhf"
RAYTRAIN = "raytrain"
FRAMEWORKS = (TUNE, TENSORBOARD, VERL, EASYR1, OPENRLHF, RAYTRAIN)
# The kinds of file a trial's results are tailed from (a cursor's kind).
RESULT_JSON, TB_EVENTS, RUN_JSONL = "result_json", "tb_events", "run_jsonl"


@dataclass(frozen=True)
class TrialDir:
    """A trial directory under a log root, as collectors.logscan found it; or a run a
    JSONL logger writes (verl's is one file among others in its project's directory:
    `path` is then that file)."""

    experiment: str
    experiment_dir: Path  # where experiment_state-*.json lives
    path: Path
    name: str
    trial_id: str | None  # None: not a Tune trial (a TensorBoard run)
    trainable: str
    live: bool  # the driver's live staging copy (driver_artifacts)
    result_files: tuple[str, ...] = ()
    event_files: tuple[str, ...] = ()
    params_file: str | None = None
    error_file: str | None = None
    root: Root | None = None  # the log root it was found under; its files stay inside
    refused: str | None = None  # why nothing of it is read (a link to a directory)
    run_files: tuple[str, ...] = ()  # a verl, EasyR1 or Ray Train callback's JSONL
    run_format: str = ""  # VERL, EASYR1 or RAYTRAIN: how its run_files' lines are shaped

    @property
    def key(self) -> tuple[str, str]:
        """(experiment, trial) as the database names it: both copies share it."""
        return self.experiment[:255], (self.trial_id or self.name)[:255]

    @property
    def framework(self) -> str:
        """What wrote it, as far as its files' names and first lines say (a TensorBoard
        run is OpenRLHF's once its tags say so: collectors.runformats.refine)."""
        if self.run_files:
            return self.run_format
        return TENSORBOARD if self.event_files else TUNE

    def logs(self) -> list[tuple[str, str]]:
        """(kind, path) of each file its results are tailed from."""
        return [*((RESULT_JSON, p) for p in self.result_files),
                *((TB_EVENTS, p) for p in self.event_files),
                *((RUN_JSONL, p) for p in self.run_files)]


@dataclass(frozen=True)
class ResultLine:
    """One line of a trial's result.json (or one step of its event files), as
    collectors.tunelogs read it."""

    trial_id: str
    attempt: int
    iteration: int
    at: datetime | None
    time_this_iter_s: float | None
    pid: int | None
    node_ip: str | None
    hostname: str | None
    metrics: dict[str, float | None]
    byte_offset: int


@dataclass(frozen=True)
class TrialUpdate:
    """What was read of one trial directory, wherever it was read (raywatch's own host or
    a node's agent): new result lines, parse problems, and side facts when they changed.
    The ingest stores it under (experiment, trial_id), so copies of one trial seen in
    several places (the driver's live copy, Tune's storage copy, a shared filesystem
    seen by two nodes) are one trial."""

    experiment: str
    experiment_dir: str  # as its reader names it: "node:/path" for an agent's
    trial_id: str  # Tune's trial id; a run's directory's name (TensorBoard, EasyR1) or its
    # file's stem (verl)
    trainable: str
    directory: str
    tensorboard: bool  # steps from event files: a step's tags may come in pieces
    live: bool = False
    # Steps printed to a trainer actor's console (collectors.agent.console_runs): the run
    # is that process's, found from Ray, never from what it prints.
    console: bool = False  # read from the driver's live staging copy
    results: tuple[ResultLine, ...] = ()
    problem_count: int = 0
    last_problem: str | None = None  # "result.json @ byte 812: line is not JSON"
    params: dict[str, Any] | None = None  # params.json, sent once
    error_text: str | None = None  # error.txt's first lines, when it changed
    error_at: datetime | None = None  # error.txt's mtime
    tune_status: str | None = None  # Tune's experiment state for this trial, when it changed
    # The search's objective (collectors.tunesearch), when it changed: an experiment's
    # fact, carried by its trials' updates. Either may be None (not known there).
    search_metric: str | None = None
    search_mode: str | None = None
    framework: str = ""  # FRAMEWORKS; "": not said
    # An RL run's: the pid of the one Ray worker on this node that holds the run's log
    # file open (its trainer actor), when it changed. Only ever a tie-break between the
    # trainer actors Ray lists on that node (dashboard/trials/runs.py).
    writer_pid: int | None = None
    # A Ray Train rank's (its own Ray Train log, read on its node): its world rank, the
    # world size when its log said it, and its last report (index and time). The rank
    # labels the writer; only rank 0's pid is the run's.
    rank: int | None = None
    world_size: int | None = None
    rank_step: int | None = None
    rank_step_at: datetime | None = None

    @classmethod
    def about(cls, trial_dir: TrialDir) -> TrialUpdate:
        """Nothing read yet: the trial dir's names, as read on this host."""
        experiment, trial_id = trial_dir.key
        return cls(experiment=experiment, experiment_dir=str(trial_dir.experiment_dir),
                   trial_id=trial_id, trainable=trial_dir.trainable[:255],
                   directory=str(trial_dir.path), tensorboard=bool(trial_dir.event_files),
                   live=trial_dir.live, framework=trial_dir.framework)
