from __future__ import annotations

from django.db import models

from dashboard.cluster.models import cluster_field


class GpuNode(models.Model):
    """A node whose GPUs its agent reports (collectors/agent/, raywatch's own host
    included): its name, address and cluster, which its GPUs are joined to Ray's nodes
    by, and when its agent last sent a GPU poll."""

    node = models.CharField(max_length=200, unique=True)  # the node's name (hostname)
    node_ip = models.CharField(max_length=64)  # joins the node's GPUs to Ray's nodes
    cluster = cluster_field()  # ... of this cluster (the agent's token says which)
    source = models.CharField(max_length=16)  # "nvml", "simulated"
    driver_version = models.CharField(max_length=64, blank=True, default="")
    registered_at = models.DateTimeField()
    last_poll_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["node"]

    def __str__(self) -> str:
        return f"GPU node {self.node} ({self.node_ip})"


class Gpu(models.Model):
    """One GPU and its latest reading. History lives in GpuSample / GpuRollup."""

    uuid = models.CharField(max_length=96, unique=True)
    node = models.CharField(max_length=200)
    node_ip = models.CharField(max_length=64)
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=200, blank=True, default="")
    simulated = models.BooleanField(default=False)
    first_seen_at = models.DateTimeField()
    at = models.DateTimeField()  # time of the latest reading
    utilization_gpu = models.FloatField(null=True)
    utilization_memory = models.FloatField(null=True)
    memory_used_bytes = models.BigIntegerField(null=True)
    memory_total_bytes = models.BigIntegerField(null=True)
    temperature_c = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    power_limit_w = models.FloatField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)
    memory_clock_mhz = models.IntegerField(null=True)
    throttle_reasons = models.JSONField(null=True)
    ecc_corrected = models.BigIntegerField(null=True)
    ecc_uncorrected = models.BigIntegerField(null=True)
    mig_mode = models.BooleanField(null=True)
    # Since when a condition has held without a break; kept at ingest so that the
    # detectors need no scan of the history.
    idle_since = models.DateTimeField(null=True)  # utilization under the idle threshold
    memory_high_since = models.DateTimeField(null=True)

    class Meta:
        ordering = ["node", "index"]
        indexes = [models.Index(fields=["node_ip"], name="gpu_node_ip")]

    def __str__(self) -> str:
        return f"{self.node} GPU {self.index} ({self.uuid})"


class GpuProcess(models.Model):
    """A process NVML lists on a GPU, as of the latest poll of its node."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="processes")
    pid = models.IntegerField()
    used_memory_bytes = models.BigIntegerField(null=True)
    type = models.CharField(max_length=16, default="compute")
    ancestors = models.JSONField(default=list)  # parent pids, nearest first
    first_seen_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "pid"], name="one_row_per_gpu_pid")]
        ordering = ["gpu_id", "pid"]


class GpuSample(models.Model):
    """One raw NVML reading, kept RAYWATCH_RAW_RETENTION_H. Written with COPY by the
    agents; narrow on purpose: a week of 1 Hz readings of 8 GPUs is 4.8 million rows."""

    # No database constraint: samples are written at 1 Hz per GPU and pruned in batches.
    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, db_constraint=False,
                            related_name="+")
    at = models.DateTimeField()
    utilization_gpu = models.FloatField(null=True)
    utilization_memory = models.FloatField(null=True)
    memory_used_bytes = models.BigIntegerField(null=True)
    temperature_c = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)

    class Meta:
        indexes = [
            models.Index(fields=["gpu", "at"], name="gpusample_gpu_at"),
            models.Index(fields=["at"], name="gpusample_at"),
        ]


class GpuRollup(models.Model):
    """One GPU over one minute: min, mean and max of each charted series. Kept
    RAYWATCH_ROLLUP_RETENTION_D; charts wider than ~33 hours read these."""

    gpu = models.ForeignKey(Gpu, on_delete=models.DO_NOTHING, db_constraint=False,
                            related_name="+")
    minute = models.DateTimeField()
    samples = models.IntegerField()
    utilization_min = models.FloatField(null=True)
    utilization_mean = models.FloatField(null=True)
    utilization_max = models.FloatField(null=True)
    memory_min = models.BigIntegerField(null=True)
    memory_mean = models.FloatField(null=True)
    memory_max = models.BigIntegerField(null=True)
    temperature_min = models.FloatField(null=True)
    temperature_mean = models.FloatField(null=True)
    temperature_max = models.FloatField(null=True)
    power_min = models.FloatField(null=True)
    power_mean = models.FloatField(null=True)
    power_max = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "minute"], name="one_rollup_per_gpu_minute")
        ]
        indexes = [models.Index(fields=["minute"], name="gpurollup_minute")]


class RollupState(models.Model):
    """How far raw samples have been rolled up: everything before `done_until`."""

    name = models.CharField(max_length=32, unique=True)
    done_until = models.DateTimeField()
