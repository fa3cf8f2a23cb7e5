"""Actions API: terminate a trial, stop a job, kill an orphaned GPU process (202 with
the action's id), follow an action, read the audit."""

from __future__ import annotations

from collections.abc import Callable

from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.actions import plans
from dashboard.actions.models import AuditEntry, AuditStep
from dashboard.actions.service import Plan, active, request
from dashboard.actions.settle import settle
from dashboard.cluster.scope import CLUSTER_PARAMETER, requested_cluster
from dashboard.core.pagination import PAGE_PARAMETERS, paginated
from dashboard.core.roles import ADMIN, OPERATOR


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditStep
        fields = ["at", "step", "detail"]


class ActionSerializer(serializers.ModelSerializer):
    steps = StepSerializer(many=True, read_only=True)

    class Meta:
        model = AuditEntry
        fields = ["id", "kind", "target_key", "target", "username", "address", "reason",
                  "requested_at", "state", "outcome", "finished_at", "steps"]


class ActionRequest(serializers.Serializer):
    reason = serializers.CharField(min_length=1, max_length=2000)
    expected = serializers.DictField(
        required=False, default=dict,
        help_text="what the page showed (pid, attempt / status): refused with 409 if the "
                  "target changed since")


class Accepted(serializers.Serializer):
    action_id = serializers.IntegerField()
    state = serializers.CharField()
    created = serializers.BooleanField(help_text="false: an action on this target was "
                                                 "already under way; this is that one")


def client_address(req: Request) -> str:
    return str(req.META.get("REMOTE_ADDR", ""))


def act(req: Request, plan_of: Callable[[], Plan], needed: str) -> Response:
    """Request the action; a refusal (an ApiError) is answered {"detail": why} by the
    API's exception handler, after the refusal was audited."""
    body = ActionRequest(data=req.data)
    body.is_valid(raise_exception=True)
    entry, created = request(req.user, plan_of, body.validated_data["expected"],
                             body.validated_data["reason"], client_address(req),
                             timezone.now(), needed)
    return Response({"action_id": entry.pk, "state": entry.state, "created": created},
                    status=status.HTTP_202_ACCEPTED)


REFUSALS = {400: None, 403: None, 404: None, 409: None, 429: None, 503: None}


class Preview(serializers.Serializer):
    kind = serializers.CharField()
    target = serializers.DictField(help_text="what the action would end, as it is now")
    active_action = serializers.IntegerField(allow_null=True)


def preview(plan_of: Callable[[], Plan]) -> Response:
    """What the confirm dialog shows; acts on nothing. A target that cannot be acted on
    is answered with why (404, 409), as the request would be."""
    plan = plan_of()
    plan.check({})
    settle(timezone.now(), plan.key)
    running = active(plan.key)
    return Response({"kind": plan.kind, "target": plan.target,
                     "active_action": running.pk if running else None})


class TerminateTrial(APIView):
    """Terminate a trial (operators): SIGTERM, RAYWATCH_TERMINATE_GRACE_S, then force."""

    @extend_schema(responses={200: Preview, 404: None, 409: None})
    def get(self, req: Request, pk: int) -> Response:
        return preview(lambda: plans.trial_plan(pk, timezone.now()))

    @extend_schema(request=ActionRequest, responses={202: Accepted, **REFUSALS})
    def post(self, req: Request, pk: int) -> Response:
        return act(req, lambda: plans.trial_plan(pk, timezone.now()), OPERATOR)


class StopJob(APIView):
    """Stop a Ray job through the Jobs API (operators)."""

    @extend_schema(parameters=[CLUSTER_PARAMETER],
                   responses={200: Preview, 404: None, 409: None})
    def get(self, req: Request, job_id: str) -> Response:
        cluster = req.query_params.get("cluster", "")
        return preview(lambda: plans.job_plan(job_id, timezone.now(), cluster))

    @extend_schema(parameters=[CLUSTER_PARAMETER], request=ActionRequest,
                   responses={202: Accepted, **REFUSALS})
    def post(self, req: Request, job_id: str) -> Response:
        cluster = req.query_params.get("cluster", "")
        return act(req, lambda: plans.job_plan(job_id, timezone.now(), cluster), OPERATOR)


class KillProcess(APIView):
    """Kill a GPU process that belongs to no live Ray worker (admins only)."""

    @extend_schema(responses={200: Preview, 404: None, 409: None})
    def get(self, req: Request, uuid: str, pid: int) -> Response:
        return preview(lambda: plans.process_plan(uuid, pid, timezone.now()))

    @extend_schema(request=ActionRequest, responses={202: Accepted, **REFUSALS})
    def post(self, req: Request, uuid: str, pid: int) -> Response:
        return act(req, lambda: plans.process_plan(uuid, pid, timezone.now()), ADMIN)


class ActionDetail(APIView):
    """One action: state (requested, signalled, succeeded, failed, or refused with the
    reason as its outcome) and its steps."""

    @extend_schema(responses=ActionSerializer)
    def get(self, req: Request, pk: int) -> Response:
        entry = get_object_or_404(AuditEntry.objects.prefetch_related("steps"), pk=pk)
        return Response(ActionSerializer(entry).data)


class AuditList(APIView):
    """The audit trail, newest first, a page at a time. Read-only: there is no way to edit
    or delete an entry."""

    @extend_schema(parameters=[
        OpenApiParameter("user", str), OpenApiParameter("kind", str,
                                                        enum=[k for k, _ in AuditEntry.KINDS]),
        OpenApiParameter("state", str, enum=list(AuditEntry.STATES)),
        OpenApiParameter("target", str),
        OpenApiParameter("since", str, description="ISO 8601"), CLUSTER_PARAMETER,
        *PAGE_PARAMETERS],
        responses={200: ActionSerializer(many=True), 400: None})
    def get(self, req: Request) -> Response:
        entries = AuditEntry.objects.prefetch_related("steps")
        params = req.query_params
        if cluster := requested_cluster(params):  # the target's cluster, as it was recorded
            entries = entries.filter(target__cluster=cluster.name)
        if user := params.get("user"):
            entries = entries.filter(username=user)
        for name in ("kind", "state"):
            if value := params.get(name):
                entries = entries.filter(**{name: value})
        if target := params.get("target"):
            entries = entries.filter(target_key__icontains=target)
        if since := params.get("since"):
            try:
                when = parse_datetime(since)
            except ValueError:  # well-formed but impossible, like February 30th
                when = None
            if when is None:
                raise ValidationError({"since": "an ISO 8601 date and time"})
            entries = entries.filter(requested_at__gte=when)
        return paginated(req, entries, lambda page: ActionSerializer(page, many=True).data)
