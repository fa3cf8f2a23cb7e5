"""GET /api/agents/coverage/ (viewers): every Ray node with its agent's state (connected,
stale, none) and what raywatch cannot see there, and the agents that match no Ray node.
The Cluster page reads it; no token, hash or prefix is in it."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.agents.coverage_data import coverage_payload


class AgentCoverage(APIView):
    """Which Ray nodes run a node agent, since when one is silent, what is lost where none
    runs; agents whose node is no Ray node."""

    @extend_schema(responses={200: dict})
    def get(self, request: Request) -> Response:
        response = Response(coverage_payload(timezone.now()))
        response["Cache-Control"] = "no-store"
        return response
