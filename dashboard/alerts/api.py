"""Alerts API: incidents (firing first), acknowledgement, silences."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.alerts.models import Silence, silenced_by
from dashboard.alerts.reach import nobody_told, reach_context
from dashboard.alerts.service import acknowledge, create_silence, matcher_problems, would_mute
from dashboard.alerts.timeline import timeline
from dashboard.cluster.scope import CLUSTER_PARAMETER, scoped
from dashboard.core.pagination import PAGE_PARAMETERS, paginated
from dashboard.core.roles import IsOperator, IsViewer
from dashboard.incidents.models import SEVERITIES, Incident

FILTERS = ("kind", "severity", "experiment", "node", "group")


class IncidentSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True,
                                    help_text="the cluster its subject is in")
    trial_id = serializers.CharField(source="trial.trial_id", allow_null=True, default=None)
    trial_pk = serializers.IntegerField(source="trial.pk", allow_null=True, default=None)
    acknowledged_by = serializers.CharField(source="acknowledged_by.username", allow_null=True,
                                            default=None)
    silenced_by = serializers.SerializerMethodField()
    nobody_told = serializers.SerializerMethodField(
        help_text="why no notification channel carried this incident, when none did and none "
                  "will (no channel, all disabled, none takes its kind and severity); else null")

    class Meta:
        model = Incident
        fields = ["id", "cluster", "kind", "state", "severity", "subject", "trial_id", "trial_pk",
                  "experiment", "node_ip", "group_key", "summary", "details", "opened_at",
                  "updated_at", "resolved_at", "acknowledged_at", "acknowledged_by", "ack_note",
                  "silenced_by", "nobody_told"]

    def get_silenced_by(self, incident: Incident) -> int | None:
        if incident.state != Incident.FIRING:
            return None
        silence = silenced_by(incident, self.context.get("silences", []))
        return silence.pk if silence else None

    def get_nobody_told(self, incident: Incident) -> str | None:
        if "carried" not in self.context:
            return None
        return nobody_told(incident, self.context)


class TimelineEntry(serializers.Serializer):
    at = serializers.DateTimeField()
    kind = serializers.CharField()
    text = serializers.CharField()
    actor = serializers.CharField(allow_null=True)
    outcome = serializers.CharField(allow_null=True)


class IncidentDetailSerializer(IncidentSerializer):
    timeline = serializers.SerializerMethodField()

    class Meta(IncidentSerializer.Meta):
        fields = [*IncidentSerializer.Meta.fields, "timeline"]

    @extend_schema_field(TimelineEntry(many=True))  # type: ignore[misc]
    def get_timeline(self, incident: Incident) -> list[dict[str, Any]]:
        return timeline(incident)


def filtered(params: Any) -> QuerySet[Incident]:
    incidents = scoped(Incident.objects.select_related("trial", "acknowledged_by", "cluster"),
                       params)
    if state := params.get("state"):
        if state not in (Incident.FIRING, Incident.RESOLVED):
            raise ValidationError({"state": "firing or resolved"})
        incidents = incidents.filter(state=state)
    if (severity := params.get("severity")) and severity not in SEVERITIES:
        raise ValidationError({"severity": f"one of {', '.join(SEVERITIES)}"})
    columns = {"kind": "kind", "severity": "severity", "experiment": "experiment",
               "node": "node_ip", "group": "group_key"}
    for name in FILTERS:
        if value := params.get(name):
            incidents = incidents.filter(**{columns[name]: value})
    return incidents.order_by("state", "-opened_at", "-id")


class AlertList(APIView):
    """Incidents, firing first then the most recent, a page at a time."""

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, enum=[Incident.FIRING, Incident.RESOLVED]),
            OpenApiParameter("severity", str, enum=list(SEVERITIES)),
            *[OpenApiParameter(name, str) for name in ("kind", "experiment", "node", "group")],
            CLUSTER_PARAMETER, *PAGE_PARAMETERS,
        ],
        responses={200: IncidentSerializer(many=True), 400: None},
    )
    def get(self, request: Request) -> Response:
        silences = Silence.active_at(timezone.now())
        return paginated(request, filtered(request.query_params),
                         lambda page: IncidentSerializer(
                             page, many=True, context=reach_context(page, silences)).data)


class AlertDetail(APIView):
    """One incident with its timeline: opened, updates, notifications and their
    outcome, acknowledgement, silences, resolved."""

    @extend_schema(responses={200: IncidentDetailSerializer, 404: None})
    def get(self, request: Request, pk: int) -> Response:
        incident = get_object_or_404(Incident.objects.select_related("trial", "cluster"), pk=pk)
        context = reach_context([incident], Silence.active_at(timezone.now()))
        return Response(IncidentDetailSerializer(incident, context=context).data)


class AckRequest(serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class AlertAck(APIView):
    """Acknowledge a firing incident (operators): reminders stop, the page shows who."""

    permission_classes = [IsOperator]

    @extend_schema(request=AckRequest, responses={200: IncidentSerializer, 400: None,
                                                  409: None, 404: None})
    def post(self, request: Request, pk: int) -> Response:
        incident = get_object_or_404(Incident, pk=pk)
        body = AckRequest(data=request.data)
        body.is_valid(raise_exception=True)
        now = timezone.now()
        acknowledge(incident, request.user, body.validated_data["note"], now)
        context = {"silences": Silence.active_at(now)}
        return Response(IncidentSerializer(incident, context=context).data)


class SilenceSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True,
                                       allow_null=True, default=None)
    active = serializers.SerializerMethodField()
    starts_at = serializers.DateTimeField(required=False)

    class Meta:
        model = Silence
        fields = ["id", *Silence.MATCHERS, "starts_at", "ends_at", "comment", "created_by",
                  "created_at", "active"]
        read_only_fields = ["id", "created_by", "created_at", "active"]

    def get_active(self, silence: Silence) -> bool:
        return silence.active(timezone.now())


class SilenceList(APIView):
    """Silences, newest end first. POST (operators) creates one: matchers are exact
    values or globs (`trial_*`), empty matches anything; at least one is needed."""

    def get_permissions(self) -> list[Any]:
        return [IsOperator()] if self.request.method == "POST" else [IsViewer()]

    @extend_schema(parameters=[OpenApiParameter("active", bool), *PAGE_PARAMETERS],
                   responses=SilenceSerializer(many=True))
    def get(self, request: Request) -> Response:
        silences = Silence.objects.select_related("created_by").order_by("-ends_at", "-id")
        if request.query_params.get("active") in ("1", "true"):
            now = timezone.now()
            silences = silences.filter(starts_at__lte=now, ends_at__gt=now)
        return paginated(request, silences, lambda page: SilenceSerializer(page, many=True).data)

    @extend_schema(request=SilenceSerializer, responses={201: SilenceSerializer, 400: None})
    def post(self, request: Request) -> Response:
        body = SilenceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data, now = body.validated_data, timezone.now()
        silence = create_silence(request.user, {m: data.get(m, "") for m in Silence.MATCHERS},
                                 data.get("starts_at") or now, data["ends_at"], data["comment"],
                                 now)
        return Response(SilenceSerializer(silence).data, status=status.HTTP_201_CREATED)


class SilencePreviewReply(serializers.Serializer):
    problems = serializers.ListField(child=serializers.CharField())
    count = serializers.IntegerField()
    incidents = IncidentSerializer(many=True)


class SilencePreview(APIView):
    """Which firing incidents a silence with these matchers would mute, before it is
    made (the silences page shows it as the form is filled in). Nothing is saved."""

    PREVIEW_LIMIT = 50

    @extend_schema(parameters=[OpenApiParameter(m, str) for m in Silence.MATCHERS],
                   responses={200: SilencePreviewReply})
    def get(self, request: Request) -> Response:
        matchers = {m: request.query_params.get(m, "").strip() for m in Silence.MATCHERS}
        problems = matcher_problems(matchers)
        muted = [] if problems else would_mute(matchers)
        context = {"silences": Silence.active_at(timezone.now())}
        return Response({"problems": problems, "count": len(muted), "incidents":
                         IncidentSerializer(muted[:self.PREVIEW_LIMIT], many=True,
                                            context=context).data})
