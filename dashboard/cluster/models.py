from __future__ import annotations

import re
from collections.abc import Iterable

from django.conf import settings
from django.db import models


class Cluster(models.Model):
    """A Ray cluster raywatch watches. The one RAY_ADDRESS points at is named
    RAYWATCH_CLUSTER_NAME (origin "settings": the single-cluster shortcut); an admin adds
    others (`manage.py cluster add`, POST /api/clusters/), and a head node's agent can
    announce its own (origin "registered", polled once an admin approves it).

    It outlives its Ray: a cluster that stops answering is UNREACHABLE, and ENDED once it
    has been for RAYWATCH_CLUSTER_ENDED_S; everything raywatch stored of it stays
    browsable. It comes back ACTIVE when it answers again (a new session if its head
    restarted)."""

    ACTIVE, UNREACHABLE, ENDED = "active", "unreachable", "ended"
    SETTINGS, ADMIN, REGISTERED = "settings", "admin", "registered"
    APPROVED, PENDING, REFUSED = "approved", "pending", "refused"

    name = models.CharField(max_length=200, unique=True)
    origin = models.CharField(max_length=16, default=SETTINGS)
    approval = models.CharField(max_length=16, default=APPROVED)  # only approved ones are polled
    # Where its dashboard is (http://host:8265, or the GCS's host:port as RAY_ADDRESS
    # takes it); empty for the settings cluster, whose address is RAY_ADDRESS.
    address = models.CharField(max_length=500, blank=True, default="")
    token = models.TextField(blank=True, default="")  # Ray's auth token: never shown
    gcs_address = models.CharField(max_length=200, blank=True, default="")
    kuberay = models.JSONField(default=dict, blank=True)  # {"name": ..., "namespace": ...}
    session_hint = models.CharField(max_length=200, blank=True, default="")  # as announced
    announced_by = models.CharField(max_length=16, blank=True, default="")  # a token's prefix
    announced_at = models.DateTimeField(null=True, blank=True)
    # What a head's agent says that differs from the GCS address or dashboard URL above:
    # {"gcs_address", "dashboard_url" (those that differ), "by" (a token's prefix), "at",
    # "decided"}. Never applied by itself: an admin decides (registry.decide).
    claim = models.JSONField(default=dict, blank=True)
    # Days an ended cluster is kept (its rows, then it); None: RAYWATCH_ENDED_CLUSTER_KEEP_D.
    keep_days = models.PositiveIntegerField(null=True, blank=True)
    dashboard_url = models.CharField(max_length=500, blank=True, default="")
    ray_version = models.CharField(max_length=64, blank=True, default="")
    state = models.CharField(max_length=16, default=ACTIVE)
    state_since = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")
    end_reason = models.TextField(blank=True, default="")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(null=True)  # its last answer
    ended_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"

    def open_claim(self) -> dict | None:
        """What its head's agent claims and no admin has decided on yet, as shown."""
        if not self.claim or self.claim.get("decided"):
            return None
        return {k: v for k, v in self.claim.items() if k != "decided"}


def settings_cluster_pk() -> int:
    """The cluster a row belongs to when its writer names none: the one RAY_ADDRESS
    points at (created on first use). Collectors always name theirs."""
    from django.conf import settings
    from django.utils import timezone

    now = timezone.now()
    cluster, _ = Cluster.objects.get_or_create(
        name=settings.CLUSTER_NAME, defaults={"first_seen_at": now, "state_since": now})
    return cluster.pk


def cluster_field() -> models.ForeignKey:
    """Every row of what Ray and Tune report belongs to a cluster."""
    return models.ForeignKey(Cluster, on_delete=models.CASCADE, default=settings_cluster_pk,
                             related_name="+")



class Node(models.Model):
    """A Ray node as the Ray state API last described it."""

    ALIVE, DEAD = "ALIVE", "DEAD"

    cluster = cluster_field()
    node_id = models.CharField(max_length=64)
    node_ip = models.CharField(max_length=64)
    hostname = models.CharField(max_length=255, blank=True, default="")
    is_head = models.BooleanField(default=False)
    state = models.CharField(max_length=16)
    state_message = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(null=True)
    ended_at = models.DateTimeField(null=True)
    # {"CPU": {"total": 8.0, "used": 2.0}, ...}; "used" is null when Ray did not say.
    resources = models.JSONField(default=dict)
    labels = models.JSONField(default=dict)
    cpu_percent = models.FloatField(null=True)
    mem_total_bytes = models.BigIntegerField(null=True)
    mem_used_bytes = models.BigIntegerField(null=True)
    object_store_total_bytes = models.BigIntegerField(null=True)
    object_store_used_bytes = models.BigIntegerField(null=True)
    object_store_spilled_bytes = models.BigIntegerField(null=True)
    object_store_restored_bytes = models.BigIntegerField(null=True)
    # When the spilled total last grew: the object_store_spilling detector's input.
    spilled_changed_at = models.DateTimeField(null=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # Per cluster: ids Ray derives (a driver's worker id comes from its job id, which
        # every cluster numbers from 01000000) repeat across clusters.
        constraints = [models.UniqueConstraint(fields=["cluster", "node_id"],
                                               name="one_node_row")]
        indexes = [models.Index(fields=["node_id"], name="node_node_id")]
        ordering = ["-is_head", "state", "node_ip", "node_id"]

    def __str__(self) -> str:
        return f"{self.node_ip} ({self.node_id[:8]}, {self.state})"


class Actor(models.Model):
    """A Ray actor as of the last poll. Ray is asked only for actors that are not
    DEAD; one it stops listing is kept here as DEAD for a day (`ended_at`), so that
    a process still holding a GPU can be told apart as a dead actor's leftover."""

    cluster = cluster_field()
    actor_id = models.CharField(max_length=64)
    state = models.CharField(max_length=32)
    pid = models.IntegerField(null=True)
    node_id = models.CharField(max_length=64, blank=True, default="")
    class_name = models.CharField(max_length=500, blank=True, default="")
    repr_name = models.CharField(max_length=500, blank=True, default="")
    name = models.CharField(max_length=500, blank=True, default="")
    job_id = models.CharField(max_length=64, blank=True, default="")
    placement_group_id = models.CharField(max_length=64, blank=True, default="")
    required_resources = models.JSONField(default=dict)
    start_time = models.DateTimeField(null=True)
    ended_at = models.DateTimeField(null=True)
    # Why Ray says it died (collectors.raystate.parse_actor_death), asked once when it
    # ended bound to a trial (dashboard/cluster/failures.note_deaths): "" not asked,
    # UNKNOWN when Ray could not say. On purpose: its owner or a user ended it (Tune
    # pausing a trial), not a crash.
    death_reason = models.CharField(max_length=32, blank=True, default="")
    death_message = models.TextField(blank=True, default="")
    ended_on_purpose = models.BooleanField(null=True)
    # How its own stderr says it ended, read once through Ray's log API when an RL run's
    # job failures say its worker died (dashboard/cluster/failures.note_crash): the fatal
    # signal and frame (collectors.raylogs.fatal_signal), or that none shows (a SIGKILL).
    crash = models.CharField(max_length=500, blank=True, default="")
    first_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "actor_id"],
                                               name="one_actor_row")]
        indexes = [models.Index(fields=["node_id", "pid"], name="actor_node_pid"),
                   models.Index(fields=["actor_id"], name="actor_actor_id")]

    def __str__(self) -> str:
        return f"{self.label} {self.actor_id[:8]} ({self.state})"

    @property
    def label(self) -> str:
        """Its name, repr name, or class name without the module and `<locals>` path."""
        return self.name or self.repr_name or self.class_name.rsplit(".", 1)[-1] or "actor"


class RayCall(models.Model):
    """A task or actor call Ray lists as running, while it runs (dashboard/cluster/calls.py):
    the one fact about a hung phase of an RL step, whose metrics come only at its end."""

    cluster = cluster_field()
    task_id = models.CharField(max_length=64)
    attempt = models.IntegerField(default=0)
    name = models.CharField(max_length=200)  # Ray's "Class.method", or the task's function
    kind = models.CharField(max_length=32, blank=True, default="")
    job_id = models.CharField(max_length=64, blank=True, default="")
    actor_id = models.CharField(max_length=64, blank=True, default="")
    node_id = models.CharField(max_length=64, blank=True, default="")
    pid = models.IntegerField(null=True)
    # The call that made it, as Ray says (parent_task_id): a trainer's step's calls are
    # the children of its run call, the ones it waits on in ray.get.
    parent_task_id = models.CharField(max_length=64, blank=True, default="")
    # When it began, as raywatch's polls place it: halfway between the poll that first
    # listed it and the one before (within half a poll: Ray's own start time costs the
    # detail columns, kilobytes a row).
    first_seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "task_id", "attempt"],
                                               name="one_call_row")]

    def __str__(self) -> str:
        return f"{self.name} ({self.task_id[:8]})"


# Ray's header of a failed call in an error message: "ray::Class.method() (pid=…", for a
# call a ray.get raised again after "RayTaskError(…): ". Ray keeps only the tail of a
# long message, cut anywhere: what is left may start inside the header ("ror(RuntimeError):
# ray::…", "::Worker…", even "kerDict.generate() (pid=…" were seen on Ray 2.60).
_CALL_HEADER = re.compile(r"([A-Za-z_][\w.]{0,199})\(\) \(pid=\d+")


class CallFailure(models.Model):
    """A call of a Ray job that failed, as Ray's state API says why (its error type, the
    traceback a raised exception left), asked for when an RL run's trainer ended
    (dashboard/cluster/failures.py): the first of a job's failures is what started the
    cascade users see. Kept as long as the dead actors are (DEAD_ACTOR_KEEP)."""

    cluster = cluster_field()
    job_id = models.CharField(max_length=64)
    task_id = models.CharField(max_length=64)
    attempt = models.IntegerField(default=0)
    name = models.CharField(max_length=200)  # Ray's "Class.method", or the task's function
    actor_id = models.CharField(max_length=64, blank=True, default="")
    node_id = models.CharField(max_length=64, blank=True, default="")
    pid = models.IntegerField(null=True)
    error_type = models.CharField(max_length=64, blank=True, default="")
    message = models.TextField(blank=True, default="")
    failed_at = models.DateTimeField(null=True)  # Ray's end time of the call
    seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "task_id", "attempt"],
                                               name="one_call_failure_row")]
        indexes = [models.Index(fields=["cluster", "job_id"], name="call_failure_job")]

    def __str__(self) -> str:
        return f"{self.name} failed ({self.error_type})"

    def first_call(self, known: Iterable[str] = ()) -> str:
        """The call where the failure began: the innermost call Ray's own header in the
        message names (a ray.get re-raises the failed call's error under `ray::Class.
        method() (pid=…)`), else this call. Ray lists each worker's failures as that worker
        reports them, and a worker that dies with its owner may never report: its failure
        is known only from the call that raised it again. A header Ray's cut left without
        its start is the one name of `known` (the job's calls, as Ray named them) that
        ends with what is left (a call's "Class.method", or an actor's class
        ending the header's class)."""
        found = _CALL_HEADER.findall(self.message)
        if not found:
            return self.name
        left = found[-1]
        # A header that ends this call's own name is this call, raising its own exception.
        if self.name.endswith(left):
            return self.name
        head, _, method = left.rpartition(".")
        whole = {name for name in known if name.endswith(left)}
        whole |= {f"{name}.{method}" for name in known
                  if head and "." not in name and name.endswith(head)}
        return whole.pop() if len(whole) == 1 else left

    def describe(self, known: Iterable[str] = (), crash: str = "") -> str:
        """What the run's page and its incident say: the call where the failure began,
        how it failed, and the message (a traceback ends with the exception); then
        `crash`, how a crashed process's own log says it died (Ray's message says only
        that it died)."""
        first = self.first_call(known)
        through = f", raised again by {self.name}" if first != self.name else ""
        kind = self.error_type or "no error type"
        died = f"\nIts process died: {crash}" if crash else ""  # the last line: the gist
        return f"{first} failed ({kind}{through}):\n{self.message.rstrip()}{died}"


class CallStack(models.Model):
    """Where an overdue call's process is: py-spy stacks its node's agent took a few
    seconds apart, and the verdict they give with its CPU and GPUs (hung in a frame, or
    slow and busy there). Asked once per call when call_overdue opens
    (dashboard/agents/callstacks.py takes them); kept after the call ends, with its
    incident."""

    PENDING, TAKEN, FAILED = "pending", "taken", "failed"

    cluster = cluster_field()
    task_id = models.CharField(max_length=64)
    name = models.CharField(max_length=200)
    pid = models.IntegerField()
    node_ip = models.CharField(max_length=64, blank=True, default="")
    requested_at = models.DateTimeField()
    taken_at = models.DateTimeField(null=True)
    state = models.CharField(max_length=16, default=PENDING)
    source = models.CharField(max_length=200, blank=True, default="")
    text = models.TextField(blank=True, default="")  # the last dump
    reason = models.TextField(blank=True, default="")  # why none was taken
    samples = models.IntegerField(default=0)
    hung = models.BooleanField(null=True)  # None: no verdict
    frame = models.CharField(max_length=500, blank=True, default="")
    waits_on = models.CharField(max_length=100, blank=True, default="")
    verdict = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "task_id"],
                                               name="one_stack_per_call")]


class CallTiming(models.Model):
    """How long the calls of one name in one Ray job took, the last few raywatch saw end:
    what a call of that job running now is held against (its usual duration is their
    median). Another run's calls of the same name are no habit of this one's (another
    model, batch or reward), and the first call of a name in a job (a validation before
    training, a warm-up) is not learned (`warmed`)."""

    cluster = cluster_field()
    job_id = models.CharField(max_length=64, blank=True, default="")
    name = models.CharField(max_length=200)
    durations = models.JSONField(default=list)  # seconds, oldest first
    warmed = models.BooleanField(default=False)  # the job's first call of the name ended
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "job_id", "name"],
                                               name="one_timing_per_job_call_name")]

    @staticmethod
    def usuals(keys: Iterable[tuple[int, str, str]]) -> dict[tuple[int, str, str], float]:
        """The usual duration of each (cluster pk, job id, name) that has one."""
        keys = set(keys)
        if not keys:
            return {}
        rows = CallTiming.objects.filter(
            cluster_id__in={k[0] for k in keys}, job_id__in={k[1] for k in keys},
            name__in={k[2] for k in keys}).values_list("cluster_id", "job_id", "name",
                                                       "durations")
        return {(c, j, n): u for c, j, n, durations in rows
                if (c, j, n) in keys and (u := CallTiming.usual(durations)) is not None}

    @staticmethod
    def usual(durations: list[float]) -> float | None:
        """A name's usual duration: the median of its last durations; None before
        CALL_MIN_HISTORY of them (one slow first call is no habit)."""
        if len(durations) < settings.CALL_MIN_HISTORY:
            return None
        ordered = sorted(durations)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2

    @staticmethod
    def overdue_after(usual: float, factor: float, min_s: float) -> float:
        """How long a call of a name whose usual duration is `usual` may run before it is
        overdue: `factor` times its usual duration, and at least `min_s` (a call of
        milliseconds is not overdue after a second). The call_overdue rule and the Jobs
        page both hold a running call against this (RAYWATCH_CALL_OVERDUE_FACTOR and
        RAYWATCH_CALL_OVERDUE_MIN_S)."""
        return max(factor * usual, min_s)


class TrainRun(models.Model):
    """A Ray Train V2 run as Train's state API lists it now (dashboard/cluster/trainruns.py):
    its status and the workers of its latest attempt, each rank's process and GPUs.
    Listed only where the run's driver had RAY_TRAIN_ENABLE_STATE_TRACKING=1."""

    cluster = cluster_field()
    run_id = models.CharField(max_length=64)  # Ray Train's id of the run
    name = models.CharField(max_length=255)  # RunConfig.name
    status = models.CharField(max_length=16)  # Ray Train's: RUNNING, FINISHED, ERRORED, ...
    status_detail = models.TextField(blank=True, default="")
    job_id = models.CharField(max_length=64, blank=True, default="")
    controller_actor_id = models.CharField(max_length=64, blank=True, default="")
    started_at = models.DateTimeField(null=True)
    ended_at = models.DateTimeField(null=True)
    attempts = models.IntegerField(default=0)
    # [{"rank", "local_rank", "actor_id", "node_id", "node_ip", "pid", "gpu_ids", "state"}],
    # by rank: the latest attempt's workers
    workers = models.JSONField(default=list)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "run_id"],
                                               name="one_train_run_row")]
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"Ray Train run {self.name} ({self.status})"


class Worker(models.Model):
    """A live Ray worker process (task or actor worker, or a driver)."""

    cluster = cluster_field()
    worker_id = models.CharField(max_length=64)
    node_id = models.CharField(max_length=64)
    pid = models.IntegerField()
    worker_type = models.CharField(max_length=32)
    job_id = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "worker_id"],
                                               name="one_worker_row")]
        indexes = [models.Index(fields=["node_id", "pid"], name="worker_node_pid")]


class Job(models.Model):
    """A Ray job (a driver), from the Jobs API."""

    cluster = cluster_field()
    key = models.CharField(max_length=128)  # submission id, else job id
    job_id = models.CharField(max_length=64, blank=True, default="")
    submission_id = models.CharField(max_length=128, blank=True, default="")
    type = models.CharField(max_length=16)
    status = models.CharField(max_length=16)
    entrypoint = models.TextField(blank=True, default="")
    message = models.TextField(blank=True, default="")
    driver_pid = models.IntegerField(null=True)
    driver_node_id = models.CharField(max_length=64, blank=True, default="")
    driver_node_ip = models.CharField(max_length=64, blank=True, default="")
    start_time = models.DateTimeField(null=True)
    end_time = models.DateTimeField(null=True)
    updated_at = models.DateTimeField()

    RUNNING_STATES = ("PENDING", "RUNNING")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "key"], name="one_job_row")]
        ordering = ["-start_time"]


class PlacementGroup(models.Model):
    """A placement group that is not REMOVED."""

    cluster = cluster_field()
    placement_group_id = models.CharField(max_length=64)
    name = models.CharField(max_length=500, blank=True, default="")
    state = models.CharField(max_length=32)
    strategy = models.CharField(max_length=32, blank=True, default="")
    bundles = models.JSONField(default=list)
    creator_job_id = models.CharField(max_length=64, blank=True, default="")
    scheduling_state = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(null=True)
    first_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "placement_group_id"],
                                               name="one_placement_group_row")]


class Demand(models.Model):
    """Work Ray cannot place yet: a pending actor, placement group or task shape.

    `first_seen_at` is when raywatch first saw it pending: how long it has waited.
    Feasibility is worked out against the alive nodes' totals at each poll.
    """

    cluster = cluster_field()
    kind = models.CharField(max_length=32)
    key = models.CharField(max_length=500)
    name = models.CharField(max_length=500, blank=True, default="")
    bundles = models.JSONField(default=list)
    count = models.IntegerField(default=1)
    strategy = models.CharField(max_length=32, blank=True, default="")
    job_id = models.CharField(max_length=64, blank=True, default="")
    ray_infeasible = models.BooleanField(null=True)  # what Ray says, when it says
    feasible = models.BooleanField(null=True)  # our verdict: could any node ever fit it
    explanation = models.TextField(blank=True, default="")
    lead = models.TextField(blank=True, default="")  # the explanation less its blockers' names
    blockers = models.JSONField(default=list)  # who holds what it needs
    # It waits only behind its own job's trials: a search's queue (dashboard.cluster.demand).
    queued = models.BooleanField(default=False)
    # When it last stopped being queued: it has waited behind others since (a trial's new
    # process not yet known for a poll or two must not count as hours of waiting).
    queue_left_at = models.DateTimeField(null=True)
    first_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "kind", "key"],
                                               name="one_demand_row_per_cluster")]
        ordering = ["first_seen_at"]


class ClusterSession(models.Model):
    """One start of a cluster's Ray head (Ray's session_name): a restarted head is a new
    session, its node ids, actor ids, pids and trials new ones; the one before is then
    ended, and why."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="sessions")
    session_name = models.CharField(max_length=200)
    ray_version = models.CharField(max_length=64, blank=True, default="")
    ray_commit = models.CharField(max_length=64, blank=True, default="")
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True)
    end_reason = models.TextField(blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "session_name"],
                                               name="one_row_per_session")]
        ordering = ["-first_seen_at", "-id"]

    def __str__(self) -> str:
        return f"{self.cluster.name} {self.session_name}"
