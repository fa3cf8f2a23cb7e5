from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from dashboard.cluster.models import Actor, Cluster, ClusterSession, Demand, Job, Node


class NodeSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = Node
        fields = [
            "cluster", "node_id", "node_ip", "hostname", "is_head", "state", "state_message",
            "started_at", "ended_at", "resources", "labels", "cpu_percent",
            "mem_total_bytes", "mem_used_bytes", "object_store_total_bytes",
            "object_store_used_bytes", "object_store_spilled_bytes",
            "object_store_restored_bytes", "last_seen_at",
        ]


class ResourceTotalSerializer(serializers.Serializer):
    total = serializers.FloatField()
    used = serializers.FloatField(allow_null=True)


class ClusterTotalsSerializer(serializers.Serializer):
    nodes_alive = serializers.IntegerField()
    nodes_dead = serializers.IntegerField()
    cpu = ResourceTotalSerializer()
    gpu = ResourceTotalSerializer()
    memory_bytes = ResourceTotalSerializer()
    object_store_bytes = ResourceTotalSerializer()


class SessionSerializer(serializers.ModelSerializer):
    class Meta:
        model = ClusterSession
        fields = ["session_name", "ray_version", "first_seen_at", "last_seen_at", "ended_at",
                  "end_reason"]


class IdentitySerializer(serializers.ModelSerializer):
    """Which cluster this is, whether it answers, and its sessions (newest first)."""

    sessions = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = ["name", "dashboard_url", "ray_version", "state", "state_since", "last_error",
                  "end_reason", "first_seen_at", "last_seen_at", "ended_at", "sessions"]

    @extend_schema_field(SessionSerializer(many=True))
    def get_sessions(self, cluster: Cluster) -> list[dict]:
        return SessionSerializer(cluster.sessions.all()[:50], many=True).data


class ClusterSummarySerializer(serializers.Serializer):
    name = serializers.CharField()
    origin = serializers.ChoiceField(choices=[Cluster.SETTINGS, Cluster.ADMIN,
                                              Cluster.REGISTERED])
    approval = serializers.ChoiceField(choices=[Cluster.APPROVED, Cluster.PENDING,
                                                Cluster.REFUSED])
    state = serializers.ChoiceField(choices=[Cluster.ACTIVE, Cluster.UNREACHABLE,
                                             Cluster.ENDED])
    state_since = serializers.DateTimeField()
    dashboard_url = serializers.CharField()
    has_token = serializers.BooleanField(help_text="whether raywatch holds a Ray token for it "
                                                   "(never shown)")
    ray_version = serializers.CharField()
    last_seen_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    end_reason = serializers.CharField()
    last_error = serializers.CharField()
    kuberay = serializers.DictField()
    gcs_address = serializers.CharField(help_text="its GCS, HOST:PORT, as an admin gave it "
                                                  "or its head's agent first announced it")
    claim = serializers.DictField(
        allow_null=True, help_text="what its head's agent says that differs from its GCS "
        "address or dashboard URL (gcs_address, dashboard_url, by: the token's prefix, at); "
        "never used until an admin approves the cluster with it")
    nodes_alive = serializers.IntegerField()
    gpus = ResourceTotalSerializer(help_text="Ray's GPUs on its alive nodes, and how many are "
                                             "in use")
    open_incidents = serializers.IntegerField()
    is_default = serializers.BooleanField(help_text="the cluster RAY_ADDRESS points at")


class NodeCountSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    alive = serializers.IntegerField()


class GpuHoursSerializer(serializers.Serializer):
    experiment_id = serializers.IntegerField()
    experiment = serializers.CharField()
    gpu_hours = serializers.FloatField()
    trials = serializers.IntegerField(help_text="its trials that held GPUs")


class HistorySerializer(serializers.Serializer):
    nodes = NodeCountSerializer(many=True, help_text="alive nodes after each start or end")
    gpu_hours = GpuHoursSerializer(many=True, help_text="per experiment, most first: its "
                                   "trials' GPUs (as asked of Ray) times how long each ran")


class ClusterSerializer(serializers.Serializer):
    totals = ClusterTotalsSerializer()
    nodes = NodeSerializer(many=True)
    identity = IdentitySerializer(allow_null=True)
    clusters = ClusterSummarySerializer(many=True, help_text="every cluster, when the page "
                                                             "is unscoped and there are several")
    history = HistorySerializer(allow_null=True, help_text="one cluster's: nodes over time, "
                                                           "GPU-hours per experiment")


class ActorSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = Actor
        fields = ["cluster", "actor_id", "state", "pid", "node_id", "class_name", "repr_name",
                  "name", "job_id", "placement_group_id", "required_resources", "start_time",
                  "ended_at", "first_seen_at"]


class JobSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = Job
        fields = ["cluster", "key", "job_id", "submission_id", "type", "status", "entrypoint",
                  "message", "driver_pid", "driver_node_id", "driver_node_ip", "start_time",
                  "end_time"]


KIND_WORDS = {"placement_group": "placement group", "actor": "actor", "task": "tasks"}
SHORT_ID = 8  # hex digits of a Ray id that tell it apart at a glance (as Ray's own CLI)


def demand_label(kind: str, key: str, name: str, job_id: str) -> str:
    """What an operator reads for a pending demand: its name, or (Tune's placement groups
    have none) its kind, a short id and the job that asked, never a 36-digit hex id
    broken across three lines of a narrow column. The full id stays in `key`."""
    if name:
        return name
    if kind == "task":
        return key  # a resource shape, e.g. "CPU:1,GPU:1"
    short = f"{key[:SHORT_ID]}…" if len(key) > SHORT_ID + 4 else key
    return f"{KIND_WORDS.get(kind, kind)} {short}" + (f" of job {job_id}" if job_id else "")


class DemandSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    waiting_s = serializers.SerializerMethodField()
    label = serializers.SerializerMethodField()

    class Meta:
        model = Demand
        fields = ["cluster", "kind", "key", "name", "label", "bundles", "count", "strategy",
                  "job_id", "ray_infeasible", "feasible", "queued", "explanation", "lead",
                  "blockers", "first_seen_at", "waiting_s"]

    def get_label(self, demand: Demand) -> str:
        return demand_label(demand.kind, demand.key, demand.name, demand.job_id)

    def get_waiting_s(self, demand: Demand) -> float:
        now = self.context.get("now")
        return round((now - demand.first_seen_at).total_seconds(), 1) if now else 0.0
