from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.core.health import health_payload


class SourceHealthSerializer(serializers.Serializer):
    source = serializers.CharField()
    scope = serializers.CharField()
    label = serializers.CharField()
    state = serializers.ChoiceField(choices=["healthy", "degraded", "down", "unknown"])
    reason = serializers.CharField()
    last_success_at = serializers.DateTimeField(allow_null=True)
    last_duration_ms = serializers.FloatField(allow_null=True)


class SourceHealthList(APIView):
    """Each collector source: healthy, degraded or down, and why."""

    @extend_schema(responses=SourceHealthSerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(health_payload())
