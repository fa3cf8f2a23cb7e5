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
from dashboard.core.pagination import PAGE_PARAMETERS, paginated


class NodeList(APIView):
    """Every Ray node raywatch knows, alive or dead, head first."""

    @extend_schema(parameters=PAGE_PARAMETERS, responses=NodeSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated(request, Node.objects.all(),
                         lambda page: NodeSerializer(page, many=True).data)


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
                    OpenApiParameter("node_id", str), *PAGE_PARAMETERS],
        responses={200: ActorSerializer(many=True), 400: None},
    )
    def get(self, request: Request) -> Response:
        actors = Actor.objects.order_by("-first_seen_at", "-id")
        if state := request.query_params.get("state"):
            if state.upper() not in ACTOR_STATES:
                raise ValidationError({"state": f"one of {', '.join(ACTOR_STATES)}"})
            actors = actors.filter(state=state.upper())
        if node_id := request.query_params.get("node_id"):
            actors = actors.filter(node_id=node_id)
        return paginated(request, actors, lambda page: ActorSerializer(page, many=True).data)


class JobList(APIView):
    """Ray jobs, newest first."""

    @extend_schema(parameters=PAGE_PARAMETERS, responses=JobSerializer(many=True))
    def get(self, request: Request) -> Response:
        return paginated(request, Job.objects.order_by("-start_time", "-id"),
                         lambda page: JobSerializer(page, many=True).data)


class DemandList(APIView):
    """Pending work Ray cannot place yet, longest waiting first, each with what it asks
    for, whether any node could ever fit it, and what it waits behind."""

    @extend_schema(parameters=PAGE_PARAMETERS, responses=DemandSerializer(many=True))
    def get(self, request: Request) -> Response:
        context = {"now": timezone.now()}
        return paginated(request, Demand.objects.order_by("first_seen_at", "id"),
                         lambda page: DemandSerializer(page, many=True, context=context).data)
