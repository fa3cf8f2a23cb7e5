"""The home page (triage) and GET /api/triage/."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.core.roles import OPERATOR, has_role
from dashboard.core.views import viewer_required
from dashboard.triage.data import triage_payload


@viewer_required
def home_page(request: HttpRequest) -> HttpResponse:
    return render(request, "triage/home.html", {
        "triage": triage_payload(), "can_act": has_role(request.user, OPERATOR)})


class TriageView(APIView):
    """What needs an operator now: firing incidents by severity, unhealthy trials,
    pending and infeasible demand, GPUs that need a look, and the sources' health."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return Response(triage_payload())
