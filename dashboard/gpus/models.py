from __future__ import annotations

from django.db import models


class GpuSample(models.Model):
    """One NVML reading of one GPU. Written in bulk by the NVML agents."""

    node_id = models.CharField(max_length=64)
    gpu_index = models.PositiveSmallIntegerField()
    gpu_uuid = models.CharField(max_length=64)
    at = models.DateTimeField()
    utilization_gpu = models.FloatField(null=True)
    utilization_memory = models.FloatField(null=True)
    memory_used_bytes = models.BigIntegerField(null=True)
    memory_total_bytes = models.BigIntegerField(null=True)
    temperature_c = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    power_limit_w = models.FloatField(null=True)
    sm_clock_mhz = models.IntegerField(null=True)
    simulated = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["gpu_uuid", "at"], name="gpusample_uuid_at")]
