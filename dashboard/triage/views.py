"""The home page (triage) and GET /api/triage/."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.cluster.scope import CLUSTER_PARAMETER, page_cluster, requested_cluster
from dashboard.core.roles import OPERATOR, has_role
from dashboard.core.views import viewer_required
from dashboard.triage.data import triage_payload


@viewer_required
def home_page(request: HttpRequest) -> HttpResponse:
    scope = page_cluster(request)
    return render(request, "triage/home.html", {
        "triage": triage_payload(cluster=scope.name if scope else None),
        "can_act": has_role(request.user, OPERATOR)})


class TriageView(APIView):
    """What needs an operator now: firing incidents by severity, unhealthy trials,
    pending and infeasible demand, GPUs that need a look, and the sources' health."""

    @extend_schema(parameters=[CLUSTER_PARAMETER], responses={200: OpenApiTypes.OBJECT,
                                                               400: None})
    def get(self, request: Request) -> Response:
        cluster = requested_cluster(request.query_params)
        return Response(triage_payload(cluster=cluster.name if cluster else None))
