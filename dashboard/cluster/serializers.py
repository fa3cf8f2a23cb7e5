from __future__ import annotations

from rest_framework import serializers

from dashboard.cluster.models import Actor, Demand, Job, Node


class NodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = [
            "node_id", "node_ip", "hostname", "is_head", "state", "state_message",
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


class ClusterSerializer(serializers.Serializer):
    totals = ClusterTotalsSerializer()
    nodes = NodeSerializer(many=True)


class ActorSerializer(serializers.ModelSerializer):
    class Meta:
        model = Actor
        fields = ["actor_id", "state", "pid", "node_id", "class_name", "repr_name", "name",
                  "job_id", "placement_group_id", "required_resources", "start_time",
                  "ended_at", "first_seen_at"]


class JobSerializer(serializers.ModelSerializer):
    class Meta:
        model = Job
        fields = ["key", "job_id", "submission_id", "type", "status", "entrypoint", "message",
                  "driver_pid", "driver_node_id", "driver_node_ip", "start_time", "end_time"]


class DemandSerializer(serializers.ModelSerializer):
    waiting_s = serializers.SerializerMethodField()

    class Meta:
        model = Demand
        fields = ["kind", "key", "name", "bundles", "count", "strategy", "job_id",
                  "ray_infeasible", "feasible", "explanation", "blockers", "first_seen_at",
                  "waiting_s"]

    def get_waiting_s(self, demand: Demand) -> float:
        now = self.context.get("now")
        return round((now - demand.first_seen_at).total_seconds(), 1) if now else 0.0
