from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.cluster.models import Actor, Demand, Job, Node
from dashboard.cluster.serializers import (
    ActorSerializer,
    ClusterSerializer,
    DemandSerializer,
    JobSerializer,
    NodeSerializer,
)
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


ACTOR_STATES = ("ALIVE", "PENDING_CREATION", "RESTARTING", "DEPENDENCIES_UNREADY", "DEAD")


class ActorList(APIView):
    """Ray actors that are not dead, plus those that died in the last day (state DEAD)."""

    @extend_schema(
        parameters=[OpenApiParameter("state", str, enum=list(ACTOR_STATES)),
                    OpenApiParameter("node_id", str)],
        responses={200: ActorSerializer(many=True), 400: None},
    )
    def get(self, request: Request) -> Response:
        actors = Actor.objects.order_by("-first_seen_at")
        if state := request.query_params.get("state"):
            if state.upper() not in ACTOR_STATES:
                raise ValidationError({"state": f"one of {', '.join(ACTOR_STATES)}"})
            actors = actors.filter(state=state.upper())
        if node_id := request.query_params.get("node_id"):
            actors = actors.filter(node_id=node_id)
        return Response(ActorSerializer(actors[:10_000], many=True).data)


class JobList(APIView):
    """Ray jobs, newest first."""

    @extend_schema(responses=JobSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(JobSerializer(Job.objects.all()[:1000], many=True).data)


class DemandList(APIView):
    """Pending work Ray cannot place yet, longest waiting first, each with what it asks
    for, whether any node could ever fit it, and what it waits behind."""

    @extend_schema(responses=DemandSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(DemandSerializer(Demand.objects.all(), many=True,
                                         context={"now": timezone.now()}).data)
