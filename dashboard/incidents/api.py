from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.incidents.models import Incident


class IncidentSerializer(serializers.ModelSerializer):
    trial_id = serializers.CharField(source="trial.trial_id", allow_null=True, default=None)

    class Meta:
        model = Incident
        fields = ["id", "kind", "state", "severity", "subject", "trial_id", "experiment",
                  "node_ip", "summary", "details", "opened_at", "updated_at", "resolved_at"]


class AlertList(APIView):
    """Incidents, firing first then the most recent. Filter with ?state=firing."""

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, enum=[Incident.FIRING, Incident.RESOLVED]),
            OpenApiParameter("kind", str),
        ],
        responses=IncidentSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        incidents = Incident.objects.select_related("trial")
        if state := request.query_params.get("state"):
            if state not in (Incident.FIRING, Incident.RESOLVED):
                raise ValidationError({"state": "firing or resolved"})
            incidents = incidents.filter(state=state)
        if kind := request.query_params.get("kind"):
            incidents = incidents.filter(kind=kind)
        incidents = incidents.order_by("state", "-opened_at")[:1000]
        return Response(IncidentSerializer(incidents, many=True).data)
