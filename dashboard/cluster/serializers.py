from __future__ import annotations

from rest_framework import serializers

from dashboard.cluster.models import Node


class NodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Node
        fields = [
            "node_id", "node_ip", "hostname", "is_head", "state", "state_message",
            "started_at", "ended_at", "resources", "labels", "cpu_percent",
            "mem_total_bytes", "mem_used_bytes", "object_store_total_bytes",
            "object_store_used_bytes", "last_seen_at",
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
