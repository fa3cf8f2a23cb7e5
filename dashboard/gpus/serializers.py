"""Shapes of the GPU API, for the OpenAPI schema (the payloads are built in views_data)."""

from __future__ import annotations

from rest_framework import serializers


class OwnerSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(["trial", "actor", "job", "worker", "orphan", "unknown"])
    label = serializers.CharField()
    url = serializers.CharField(allow_null=True)
    actor_id = serializers.CharField(allow_null=True)
    job_id = serializers.CharField(allow_null=True)
    trial_id = serializers.CharField(allow_null=True)
    reason = serializers.CharField()


class GpuProcessSerializer(serializers.Serializer):
    pid = serializers.IntegerField()
    used_memory = serializers.IntegerField(allow_null=True)
    type = serializers.CharField()
    first_seen_at = serializers.DateTimeField()
    age_s = serializers.FloatField()
    owner = OwnerSerializer()


class GpuSerializer(serializers.Serializer):
    uuid = serializers.CharField()
    node = serializers.CharField()
    node_ip = serializers.CharField()
    index = serializers.IntegerField()
    name = serializers.CharField()
    simulated = serializers.BooleanField()
    at = serializers.DateTimeField()
    utilization = serializers.FloatField(allow_null=True)
    utilization_memory = serializers.FloatField(allow_null=True)
    memory_used = serializers.IntegerField(allow_null=True)
    memory_total = serializers.IntegerField(allow_null=True)
    temperature = serializers.FloatField(allow_null=True)
    power = serializers.FloatField(allow_null=True)
    power_limit = serializers.FloatField(allow_null=True)
    sm_clock = serializers.IntegerField(allow_null=True)
    memory_clock = serializers.IntegerField(allow_null=True)
    throttle_reasons = serializers.ListField(child=serializers.CharField(), allow_null=True)
    ecc_corrected = serializers.IntegerField(allow_null=True)
    ecc_uncorrected = serializers.IntegerField(allow_null=True)
    mig_mode = serializers.BooleanField(allow_null=True)
    idle_since = serializers.DateTimeField(allow_null=True)
    stale = serializers.BooleanField()
    state = serializers.ChoiceField(["stale", "hardware", "orphan", "hot", "idle", "free", "busy"])
    owner = serializers.CharField()
    processes = GpuProcessSerializer(many=True)
    url = serializers.CharField()


class SeriesSerializer(serializers.Serializer):
    t = serializers.ListField(child=serializers.DateTimeField())
    utilization = serializers.ListField(child=serializers.FloatField(allow_null=True))
    utilization_min = serializers.ListField(child=serializers.FloatField(allow_null=True))
    utilization_max = serializers.ListField(child=serializers.FloatField(allow_null=True))
    memory_used = serializers.ListField(child=serializers.FloatField(allow_null=True))
    memory_used_max = serializers.ListField(child=serializers.FloatField(allow_null=True))
    temperature = serializers.ListField(child=serializers.FloatField(allow_null=True))
    power = serializers.ListField(child=serializers.FloatField(allow_null=True))


class GpuChartSerializer(serializers.Serializer):
    uuid = serializers.CharField()
    simulated = serializers.BooleanField()
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    bucket_s = serializers.IntegerField()
    source = serializers.ChoiceField(["raw", "rollup"])
    points = serializers.IntegerField()
    series = SeriesSerializer()
