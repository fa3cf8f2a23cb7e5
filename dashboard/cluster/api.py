from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.cluster.models import Actor, Demand, Job, Node
from dashboard.cluster.registry import add_cluster, decide
from dashboard.cluster.scope import CLUSTER_PARAMETER, requested_cluster, scoped
from dashboard.cluster.serializers import (
    ActorSerializer,
    ClusterSerializer,
    ClusterSummarySerializer,
    DemandSerializer,
    JobSerializer,
    NodeSerializer,
)
from dashboard.cluster.views_data import cluster_payload, overview
from dashboard.core.pagination import PAGE_PARAMETERS, paginated
from dashboard.core.roles import IsAdmin, IsViewer


class NodeList(APIView):
    """Every Ray node raywatch knows, alive or dead, head first."""

    @extend_schema(parameters=[CLUSTER_PARAMETER, *PAGE_PARAMETERS],
                   responses={200: NodeSerializer(many=True), 400: None})
    def get(self, request: Request) -> Response:
        return paginated(request, scoped(Node.objects.select_related("cluster"),
                                         request.query_params),
                         lambda page: NodeSerializer(page, many=True).data)


class ClusterView(APIView):
    """What the Cluster page shows: one cluster's totals, nodes and identity (?cluster=;
    without it, the only cluster, or with several every cluster's nodes and an overview
    of each)."""

    @extend_schema(parameters=[CLUSTER_PARAMETER], responses={200: ClusterSerializer,
                                                               400: None})
    def get(self, request: Request) -> Response:
        cluster = requested_cluster(request.query_params)
        return Response(cluster_payload(cluster.name if cluster else None, history=True))


ACTOR_STATES = ("ALIVE", "PENDING_CREATION", "RESTARTING", "DEPENDENCIES_UNREADY", "DEAD")


class ActorList(APIView):
    """Ray actors that are not dead, plus those that died in the last day (state DEAD)."""

    @extend_schema(
        parameters=[OpenApiParameter("state", str, enum=list(ACTOR_STATES)),
                    OpenApiParameter("node_id", str), CLUSTER_PARAMETER, *PAGE_PARAMETERS],
        responses={200: ActorSerializer(many=True), 400: None},
    )
    def get(self, request: Request) -> Response:
        actors = scoped(Actor.objects.select_related("cluster").order_by("-first_seen_at", "-id"),
                        request.query_params)
        if state := request.query_params.get("state"):
            if state.upper() not in ACTOR_STATES:
                raise ValidationError({"state": f"one of {', '.join(ACTOR_STATES)}"})
            actors = actors.filter(state=state.upper())
        if node_id := request.query_params.get("node_id"):
            actors = actors.filter(node_id=node_id)
        return paginated(request, actors, lambda page: ActorSerializer(page, many=True).data)


class JobList(APIView):
    """Ray jobs, newest first."""

    @extend_schema(parameters=[CLUSTER_PARAMETER, *PAGE_PARAMETERS],
                   responses={200: JobSerializer(many=True), 400: None})
    def get(self, request: Request) -> Response:
        jobs = Job.objects.select_related("cluster").order_by("-start_time", "-id")
        return paginated(request, scoped(jobs, request.query_params),
                         lambda page: JobSerializer(page, many=True).data)


class DemandList(APIView):
    """Pending work Ray cannot place yet, longest waiting first, each with what it asks
    for, whether any node could ever fit it, and what it waits behind."""

    @extend_schema(parameters=[CLUSTER_PARAMETER, *PAGE_PARAMETERS],
                   responses={200: DemandSerializer(many=True), 400: None})
    def get(self, request: Request) -> Response:
        context = {"now": timezone.now()}
        demands = Demand.objects.select_related("cluster").order_by("first_seen_at", "id")
        return paginated(request, scoped(demands, request.query_params),
                         lambda page: DemandSerializer(page, many=True, context=context).data)


class AddClusterRequest(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    address = serializers.CharField(max_length=500, help_text="its dashboard's URL, "
                                                              "http://HEAD:8265")
    token = serializers.CharField(required=False, allow_blank=True, default="",
                                  help_text="Ray's auth token for it, if it wants one")
    gcs_address = serializers.CharField(required=False, allow_blank=True, default="",
                                        max_length=200,
                                        help_text="its GCS, HOST:PORT (to kill a trial's actor)")


class ClusterList(APIView):
    """Every cluster raywatch watches or watched ("all clusters"): whether it answers,
    its nodes, Ray's GPUs busy and idle, open incidents. Admins add one with POST."""

    def get_permissions(self) -> list[Any]:
        return [IsAdmin()] if self.request.method == "POST" else [IsViewer()]

    @extend_schema(responses=ClusterSummarySerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(ClusterSummarySerializer(overview(), many=True).data)

    @extend_schema(request=AddClusterRequest,
                   responses={201: ClusterSummarySerializer, 400: None, 403: None})
    def post(self, request: Request) -> Response:
        body = AddClusterRequest(data=request.data)
        body.is_valid(raise_exception=True)
        cluster = add_cluster(body.validated_data["name"], body.validated_data["address"],
                              body.validated_data["token"], timezone.now(),
                              user=request.user,
                              gcs_address=body.validated_data["gcs_address"],
                              client=str(request.META.get("REMOTE_ADDR") or ""))
        row = next(r for r in overview() if r["name"] == cluster.name)
        return Response(ClusterSummarySerializer(row).data, status=201)


class DecideRequest(serializers.Serializer):
    address = serializers.CharField(required=False, allow_blank=True, default="",
                                    max_length=500,
                                    help_text="its dashboard's URL, if not the one announced")
    token = serializers.CharField(required=False, allow_blank=True, allow_null=True,
                                  default=None, help_text="Ray's auth token for it")
    gcs_address = serializers.CharField(required=False, allow_blank=True, default="",
                                        max_length=200,
                                        help_text="its GCS, HOST:PORT, if not the one it has")


class ClusterDecision(APIView):
    """Approve (polled from the next Ray poll on) or refuse (never polled) a cluster its
    head node's agent announced, or settle what that agent claims (admins)."""

    permission_classes = [IsAdmin]
    approve = True

    @extend_schema(request=DecideRequest,
                   responses={200: ClusterSummarySerializer, 400: None, 403: None, 404: None,
                              409: None})
    def post(self, request: Request, name: str) -> Response:
        body = DecideRequest(data=request.data)
        body.is_valid(raise_exception=True)
        cluster = decide(name, self.approve, timezone.now(), user=request.user,
                         address=body.validated_data["address"],
                         token=body.validated_data["token"],
                         gcs_address=body.validated_data["gcs_address"],
                         client=str(request.META.get("REMOTE_ADDR") or ""))
        row = next(r for r in overview() if r["name"] == cluster.name)
        return Response(ClusterSummarySerializer(row).data)
