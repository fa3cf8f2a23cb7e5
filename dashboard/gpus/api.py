from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.cluster.scope import CLUSTER_PARAMETER, requested_cluster
from dashboard.core.pagination import PAGE_PARAMETERS, paginated
from dashboard.gpus.models import Gpu
from dashboard.gpus.serializers import GpuChartSerializer, GpuSerializer
from dashboard.gpus.series import MAX_POINTS, gpu_chart
from dashboard.gpus.views_data import GPU_STATES, gpu_payload, gpus_in
from dashboard.gpus.wall import MAX_NODES_A_PAGE, NODES_A_PAGE, WallQuery, wall_page
from dashboard.trials.table import BadQuery

RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class GpuList(APIView):
    """Every GPU with its latest reading and the processes holding it, with owners.
    `simulated` is true for readings from the demo's simulated source."""

    @extend_schema(
        parameters=[OpenApiParameter("node", str, description="only this node's GPUs"),
                    CLUSTER_PARAMETER, *PAGE_PARAMETERS],
        responses={200: GpuSerializer(many=True), 400: None},
    )
    def get(self, request: Request) -> Response:
        cluster = requested_cluster(request.query_params)
        gpus = gpus_in(cluster.name if cluster else None).order_by("node", "index", "id")
        if node := request.query_params.get("node"):
            gpus = gpus.filter(node=node)
        return paginated(request, gpus, gpu_payload)


class GpuWall(APIView):
    """The GPU wall a page of nodes at a time (the wall page reads this): whole nodes in
    name order, the tiles that match the filter and states, and the whole wall's state
    counts."""

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, description="words each shown tile contains: node, "
                             "address, owner, GPU name or uuid"),
            OpenApiParameter("state", str, description="comma-separated states to show, of "
                             + ", ".join(GPU_STATES)),
            OpenApiParameter("page", {"type": "integer", "minimum": 1},
                             description="a page past the last gives the last"),
            OpenApiParameter("per_page", {"type": "integer", "minimum": 1,
                                          "maximum": MAX_NODES_A_PAGE},
                             description=f"nodes a page ({NODES_A_PAGE})"),
            CLUSTER_PARAMETER,
        ],
        responses={200: None, 400: None},
    )
    def get(self, request: Request) -> Response:
        cluster = requested_cluster(request.query_params)
        try:
            query = WallQuery.from_params(request.query_params)
        except BadQuery as bad:
            raise ValidationError(bad.errors) from None
        return Response(wall_page(cluster.name if cluster else None, query))


def parse_time(name: str, raw: str | None, now: datetime, default: datetime) -> datetime:
    """ISO 8601, seconds since the epoch, or relative to now: -15m, -6h, -7d."""
    if raw is None or raw == "":
        return default
    if match := RELATIVE.match(raw):
        return now - timedelta(seconds=float(match[1]) * UNITS[match[2]])
    try:
        return datetime.fromtimestamp(float(raw), tz=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        parsed = parse_datetime(raw)
    except ValueError:
        parsed = None
    if parsed is None:
        raise ValidationError({name: "an ISO 8601 time, seconds since the epoch, or -15m/-6h/-7d"})
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class GpuSamples(APIView):
    """One GPU's history, downsampled in the database to at most `points` buckets
    (2,000 at most): utilization (mean, min, max), memory, temperature, power."""

    @extend_schema(
        parameters=[
            OpenApiParameter("since", str, description="ISO 8601, epoch seconds or -1h (default)"),
            OpenApiParameter("until", str, description="ISO 8601, epoch seconds or now (default)"),
            OpenApiParameter("points", {"type": "integer", "minimum": 1, "maximum": MAX_POINTS},
                             description=f"1 to {MAX_POINTS} (default)"),
        ],
        responses={200: GpuChartSerializer, 400: None, 404: None},
    )
    def get(self, request: Request, uuid: str) -> Response:
        gpu = get_object_or_404(Gpu, uuid=uuid)
        now = timezone.now()
        until = parse_time("until", request.query_params.get("until"), now, now)
        since = parse_time("since", request.query_params.get("since"), now,
                           until - timedelta(hours=1))
        if since >= until:
            raise ValidationError({"since": "must be before until"})
        raw = request.query_params.get("points", str(MAX_POINTS))
        if not raw.isdigit() or not 0 < int(raw) <= MAX_POINTS:
            raise ValidationError({"points": f"a whole number from 1 to {MAX_POINTS}"})
        chart = gpu_chart(gpu.pk, since, until, int(raw))
        return Response({"uuid": gpu.uuid, "simulated": gpu.simulated, **chart.as_dict()})
