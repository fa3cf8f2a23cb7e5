from __future__ import annotations

from django.db import models

from dashboard.cluster.models import cluster_field


class Experiment(models.Model):
    """A Tune experiment (RunConfig.name), or the directory that holds training runs:
    TensorBoard runs, or the JSONL runs of verl's and EasyR1's file loggers (a project)."""

    # How its trials' steps are read: Tune's result.json, TensorBoard's event files (a
    # step's tags may come in pieces), a file logger's JSONL.
    TUNE, TENSORBOARD, JSONL = "tune", "tensorboard", "jsonl"
    # The RL runs of one Ray job found from Ray: each trainer actor of the job a run, its
    # steps read from its console (collectors.agent.console_runs).
    CONSOLE = "console"

    cluster = cluster_field()  # where it ran: two clusters may each run one of this name
    name = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, default=TUNE)
    paths = models.JSONField(default=list)  # every directory it was found in
    metric = models.CharField(max_length=255, blank=True, default="")
    mode = models.CharField(max_length=3, blank=True, default="")  # "min" or "max"
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "name"],
                                               name="one_experiment_per_cluster")]
        indexes = [models.Index(fields=["name"], name="experiment_name")]
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return self.name


class Trial(models.Model):
    PENDING, RUNNING, PAUSED = "PENDING", "RUNNING", "PAUSED"
    TERMINATED, ERROR, UNKNOWN = "TERMINATED", "ERROR", "UNKNOWN"
    FINISHED = (TERMINATED, ERROR)

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="trials")
    trial_id = models.CharField(max_length=255)
    trainable = models.CharField(max_length=255, blank=True, default="")
    directory = models.TextField(blank=True, default="")
    status = models.CharField(max_length=16, default=UNKNOWN)
    # What wrote its files (records.FRAMEWORKS): tune, verl, easyr1, openrlhf, tensorboard.
    framework = models.CharField(max_length=16, blank=True, default="")
    tune_status = models.CharField(max_length=16, blank=True, default="")  # what Tune's file says
    status_reason = models.CharField(max_length=500, blank=True, default="")
    config = models.JSONField(default=dict)
    attempt = models.PositiveIntegerField(default=1)
    pid = models.IntegerField(null=True)
    # An RL run's log writer as its node's reader found it (the Ray worker holding the
    # log file open): which of two trainer actors on one node is the run's.
    writer_pid = models.IntegerField(null=True)
    node_ip = models.CharField(max_length=64, blank=True, default="")
    hostname = models.CharField(max_length=255, blank=True, default="")
    iteration = models.IntegerField(null=True)
    last_result_at = models.DateTimeField(null=True)  # the result's own timestamp
    last_ingested_at = models.DateTimeField(null=True)  # when raywatch read it
    last_metrics = models.JSONField(default=dict)
    # Each metric's [lowest, highest] over all results: the best by any metric and mode.
    metric_range = models.JSONField(default=dict)
    last_step_s = models.FloatField(null=True)
    error_text = models.TextField(blank=True, default="")
    error_attempt = models.PositiveIntegerField(default=0)  # the attempt error.txt was about
    error_at = models.DateTimeField(null=True)  # when error.txt was written (its mtime)
    # When raywatch read that error: it waits for a Ray answer asked after this
    # (trials/detect.awaits_ray); the mtime is the node's clock, this is raywatch's.
    error_read_at = models.DateTimeField(null=True)
    parse_errors = models.PositiveIntegerField(default=0)
    last_parse_error = models.TextField(blank=True, default="")
    process_alive = models.BooleanField(null=True)  # None: Ray could not tell
    gpus = models.FloatField(null=True)  # the GPUs its actor asked Ray for, when last seen
    process_gone_since = models.DateTimeField(null=True)
    # Who ended which attempt through a raywatch action (dashboard.actions.executor): Tune
    # records that kill as an error, which is then the operator's, not news to page about.
    terminated_by = models.CharField(max_length=150, blank=True, default="")
    terminated_attempt = models.PositiveIntegerField(default=0)
    # When the detectors must look at it again though nothing new arrived: the deadline
    # it crosses next (its stall limit, a grace period). None: only new data can change
    # what they find (dashboard.trials.detect evaluates only what changed or is due).
    check_at = models.DateTimeField(null=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["experiment", "trial_id"], name="one_trial_per_id")
        ]
        indexes = [models.Index(fields=["trial_id"], name="trial_trial_id"),
                   models.Index(fields=["updated_at"], name="trial_updated_at"),
                   models.Index(fields=["check_at"], name="trial_check_at"),
                   models.Index(fields=["pid"], name="trial_pid")]
        ordering = ["experiment", "trial_id"]

    def __str__(self) -> str:
        return f"{self.experiment.name}/{self.trial_id}"

    @property
    def ended_by(self) -> str:
        """Who ended its current attempt through raywatch, or ""."""
        return self.terminated_by if self.terminated_attempt == self.attempt else ""


class StepResult(models.Model):
    """One reported result (a Tune iteration or a TensorBoard step) of one attempt."""

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="results")
    attempt = models.PositiveIntegerField(default=1)
    iteration = models.IntegerField()
    at = models.DateTimeField(null=True)
    ingested_at = models.DateTimeField()
    time_this_iter_s = models.FloatField(null=True)
    metrics = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["trial", "attempt", "iteration"], name="one_result_per_iteration"
            )
        ]
        indexes = [models.Index(fields=["trial", "-id"], name="result_trial_recent")]


class TrialStack(models.Model):
    """A Python stack of a trial's process, asked for when its trial_stalled incident
    opened or by an operator from the trial page, then taken in the background by the
    best source that can (dashboard.trials.probes); or why none could."""

    PENDING, TAKEN, FAILED = "pending", "taken", "failed"

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="stacks")
    pid = models.IntegerField(null=True)
    node_ip = models.CharField(max_length=64, blank=True, default="")
    hostname = models.CharField(max_length=255, blank=True, default="")
    requested_at = models.DateTimeField()
    # Who asked (kept when the account goes); empty: the stall detector.
    requested_by = models.CharField(max_length=150, blank=True, default="")
    address = models.CharField(max_length=64, blank=True, default="")
    state = models.CharField(max_length=16, default=PENDING)
    source = models.CharField(max_length=300, blank=True, default="")
    text = models.TextField(blank=True, default="")
    reason = models.TextField(blank=True, default="")  # why not; or what better sources said
    taken_at = models.DateTimeField(null=True)
    # Stacks taken seconds apart by the node's agent give a verdict (as an overdue call's,
    # cluster.models.CallStack): hung in a frame (waiting on what), or slow and busy there.
    samples = models.IntegerField(default=0)
    hung = models.BooleanField(null=True)  # None: no verdict
    frame = models.CharField(max_length=500, blank=True, default="")
    waits_on = models.CharField(max_length=100, blank=True, default="")
    verdict = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [models.Index(fields=["trial", "-requested_at"], name="stack_trial_recent")]

    def __str__(self) -> str:
        return f"stack of {self.trial_id} at {self.requested_at:%H:%M:%S} ({self.state})"


class RunRank(models.Model):
    """A rank of a multi-rank run (Ray Train), as its own log says on its node: its pid
    there, its world rank and how far it reported. A straggler verdict takes every rank's
    stacks and names the rank that is not where the others wait (trials/ranks.py)."""

    trial = models.ForeignKey(Trial, on_delete=models.CASCADE, related_name="ranks")
    rank = models.IntegerField()
    pid = models.IntegerField()
    node = models.CharField(max_length=255, blank=True, default="")  # its agent's; "": here
    world_size = models.IntegerField(null=True)
    step = models.IntegerField(null=True)  # its last report
    step_at = models.DateTimeField(null=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trial", "rank"],
                                               name="one_row_per_rank")]

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.trial_id} (pid {self.pid} on {self.node or 'here'})"


class LogReading(models.Model):
    """How far raywatch's central reading of this host's log dirs reaches, shared by every
    raywatch process (a Celery worker's children take turns reading; any of them may
    evaluate): one row, written by whichever process reads (dashboard.trials.lag)."""

    ONLY = 1  # the one row's pk: one central reader, of the settings cluster's log dirs

    read_from = models.DateTimeField(null=True)  # when the newest finished read began
    read_ended = models.DateTimeField(null=True)  # when it ended
    reading_since = models.DateTimeField(null=True)  # a read in progress began (None: none)
    progress_at = models.DateTimeField(null=True)  # that read's last sign of progress

    def __str__(self) -> str:
        return f"log dirs read from {self.read_from} (reading since {self.reading_since})"
