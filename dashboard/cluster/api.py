from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.cluster.models import Node
from dashboard.cluster.serializers import ClusterSerializer, NodeSerializer
from dashboard.cluster.state import cluster_payload


class NodeList(APIView):
    """Every Ray node raywatch knows, alive or dead, head first."""

    @extend_schema(responses=NodeSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(NodeSerializer(Node.objects.all(), many=True).data)


class ClusterView(APIView):
    """Cluster totals and every node: what the cluster page shows."""

    @extend_schema(responses=ClusterSerializer)
    def get(self, request: Request) -> Response:
        return Response(cluster_payload())
