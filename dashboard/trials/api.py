from __future__ import annotations

from typing import Any

from django.http import Http404
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from collectors.raylogs import MAX_LINES
from collectors.tunelogs import MAX_KEY
from dashboard.cluster.scope import CLUSTER_PARAMETER, scoped
from dashboard.core.pagination import PAGE_PARAMETERS, paginated
from dashboard.core.push import jsonable
from dashboard.core.roles import IsOperator, IsViewer
from dashboard.trials.curves import CurveRequest, experiment_curves
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.objective import objective_of
from dashboard.trials.output import trial_output
from dashboard.trials.serializers import StepResultSerializer, TrialSerializer, trial_rows
from dashboard.trials.stacks import latest_stack, request_stack, stack_payload
from dashboard.trials.table import (
    FIXED_SORTS,
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    BadQuery,
    TableQuery,
    trial_table,
)
from dashboard.trials.views_data import results_payload

STATUSES = ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR", "UNKNOWN")


def find_trial(pk: int) -> Trial:
    """A trial by its row: a trial id alone can be claimed by any cluster's logs."""
    trial = Trial.objects.select_related("experiment__cluster").filter(pk=pk).first()
    if trial is None:
        raise Http404(f"no trial #{pk}")
    return trial


class TrialList(APIView):
    """Trials raywatch has found, with status, progress and health: newest experiment
    first, a page at a time (Link and X-Total-Count headers)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("experiment", str, description="experiment name"),
            OpenApiParameter("status", str, enum=list(STATUSES)),
            CLUSTER_PARAMETER, *PAGE_PARAMETERS,
        ],
        responses={200: TrialSerializer(many=True), 400: None},
    )
    def get(self, request: Request) -> Response:
        trials = scoped(Trial.objects.select_related("experiment").order_by("-experiment_id",
                                                                              "trial_id"),
                        request.query_params, "experiment__cluster")
        if name := request.query_params.get("experiment"):
            trials = trials.filter(experiment__name=name)
        if status := request.query_params.get("status"):
            if status.upper() not in STATUSES:
                raise ValidationError({"status": f"one of {', '.join(STATUSES)}"})
            trials = trials.filter(status=status.upper())
        return paginated(request, trials, trial_rows)


class TrialResults(APIView):
    """Every result of one trial (all attempts), oldest first."""

    @extend_schema(
        parameters=[OpenApiParameter("limit", {"type": "integer", "minimum": 1,
                                               "maximum": 100_000},
                                     description="at most this many (20000)")],
        responses={200: StepResultSerializer(many=True), 400: None, 404: None},
    )
    def get(self, request: Request, pk: int) -> Response:
        limit = whole_number(request, "limit", 20_000, 1, 100_000)
        return Response(results_payload(find_trial(pk), limit))


class StackSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["pending", "taken", "failed"])
    source = serializers.CharField(help_text="who took it (py-spy by the agent of gpu-b, ...)")
    text = serializers.CharField(help_text="py-spy's dump; empty unless taken")
    reason = serializers.CharField(help_text="why it could not be taken; when taken, what "
                                             "better sources said first")
    pid = serializers.IntegerField(allow_null=True)
    where = serializers.CharField()
    requested_at = serializers.DateTimeField()
    requested_by = serializers.CharField()
    taken_at = serializers.DateTimeField(allow_null=True)
    samples = serializers.IntegerField(help_text="how many stacks were taken, seconds apart")
    hung = serializers.BooleanField(allow_null=True, help_text="the verdict of those stacks: "
                                    "true hung, false slow and busy, null none")
    frame = serializers.CharField(help_text="the trial's own frame it waits or runs in")
    waits_on = serializers.CharField(help_text="what it waits on, in words (a collective, "
                                     "ray.get on another call, a sleep...)")
    verdict = serializers.CharField(help_text="the verdict as the incident says it")


class StackReply(serializers.Serializer):
    stack = StackSerializer(allow_null=True)
    created = serializers.BooleanField(required=False, help_text="false: a stack of this "
                                       "trial was already being taken; this is that one")


class TrialStackView(APIView):
    """Where a trial's process is: its Python stack (py-spy), taken by the node's agent,
    else Ray's /worker/traceback, else on raywatch's own host. GET: the newest one.
    POST (operators): take one now, in the background (202); follow it with GET or the
    trial page."""

    def get_permissions(self) -> list[Any]:
        return [IsOperator()] if self.request.method == "POST" else [IsViewer()]

    @extend_schema(responses={200: StackReply, 404: None})
    def get(self, request: Request, pk: int) -> Response:
        return Response({"stack": stack_payload(latest_stack(find_trial(pk)))})

    @extend_schema(request=None, responses={202: StackReply, 403: None, 404: None, 409: None})
    def post(self, request: Request, pk: int) -> Response:
        trial = find_trial(pk)
        if trial.pid is None:
            return Response({"detail": f"trial {trial.trial_id} has no process yet"},
                            status=status.HTTP_409_CONFLICT)
        stack, created = request_stack(trial, timezone.now(), request.user,
                                       str(request.META.get("REMOTE_ADDR", "")))
        return Response({"stack": stack_payload(stack), "created": created},
                        status=status.HTTP_202_ACCEPTED)


class OutputSerializer(serializers.Serializer):
    stdout = serializers.CharField(allow_null=True, help_text="the last lines of the trial's "
                                   "Ray worker's .out file (what it printed)")
    stderr = serializers.CharField(allow_null=True, help_text="likewise its .err file")
    reason = serializers.CharField(allow_null=True, help_text="why there is no output, or "
                                   "only part of it")
    source = serializers.CharField(help_text="where it was read")
    actor_id = serializers.CharField(allow_null=True)
    actor_url = serializers.CharField(allow_null=True, help_text="the actor in Ray's dashboard")


class TrialOutputView(APIView):
    """The tail of a trial's recent output (its Ray worker's stdout and stderr) through
    Ray's log API, read now; `reason` says why when Ray cannot give it."""

    @extend_schema(
        parameters=[OpenApiParameter("lines", {"type": "integer", "minimum": 1,
                                               "maximum": MAX_LINES},
                                     description="lines of each (100)")],
        responses={200: OutputSerializer, 400: None, 404: None},
    )
    def get(self, request: Request, pk: int) -> Response:
        lines = whole_number(request, "lines", 100, 1, MAX_LINES)
        return Response(trial_output(find_trial(pk), lines).as_dict())


class CurveSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    trial_id = serializers.CharField()
    status = serializers.CharField()
    attempt = serializers.IntegerField()
    x = serializers.ListField(child=serializers.IntegerField(), help_text="iterations")
    y = serializers.ListField(child=serializers.FloatField(), help_text="the metric")


class CurvesSerializer(serializers.Serializer):
    metric = serializers.CharField()
    mode = serializers.ChoiceField(choices=["min", "max"])
    trials = serializers.IntegerField(help_text="trials in the experiment")
    shown = serializers.IntegerField(help_text="curves given: the best trials first")
    curves = CurveSerializer(many=True)


class ExperimentCurves(APIView):
    """One metric of the experiment's trials by iteration (each trial's current attempt),
    the best `trials` of them by the metric and mode; long curves are thinned."""

    @extend_schema(
        parameters=[
            OpenApiParameter("metric", str, required=True),
            OpenApiParameter("mode", str, enum=["min", "max"],
                             description="which trials are best (the search's mode)"),
            OpenApiParameter("trials", {"type": "integer", "minimum": 1, "maximum": 1000},
                             description="at most this many curves (100)"),
        ],
        responses={200: CurvesSerializer, 400: None, 404: None},
    )
    def get(self, request: Request, pk: int) -> Response:
        experiment = get_object_or_404(Experiment, pk=pk)
        metric = request.query_params.get("metric", "")
        if not metric or len(metric) > MAX_KEY:
            raise ValidationError({"metric": f"a metric name of 1 to {MAX_KEY} characters"})
        mode = request.query_params.get("mode") or objective_of(experiment).mode
        if mode not in ("min", "max"):
            raise ValidationError({"mode": "min or max"})
        want = CurveRequest(metric, mode, whole_number(request, "trials", 100, 1, 1000))
        return Response(experiment_curves(experiment, want))


class TablePageSerializer(serializers.Serializer):
    trials = TrialSerializer(many=True, help_text="the page's rows, in order")
    matched = serializers.IntegerField(help_text="trials the filters match")
    total = serializers.IntegerField(help_text="trials in the experiment")
    page = serializers.IntegerField(help_text="this page (a page past the last gives the last)")
    pages = serializers.IntegerField()
    page_size = serializers.IntegerField()
    hp_keys = serializers.ListField(child=serializers.CharField(),
                                    help_text="the hyperparameter columns: those that differ first")
    constants = serializers.DictField(help_text="hyperparameters the same in every trial")
    metrics = serializers.ListField(child=serializers.CharField(),
                                    help_text="every metric reported; the search's first")
    objective = serializers.DictField(help_text="the search's metric and mode, and whence")
    metric = serializers.CharField(allow_blank=True, help_text="the metric Best and Last show")
    mode = serializers.ChoiceField(choices=["min", "max"])
    query = serializers.DictField(help_text="the query as understood")
    server_now = serializers.DateTimeField()


class ExperimentTrials(APIView):
    """One experiment's trial table a page at a time: filtered, sorted and paged on the
    server (the experiment page's table reads this)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, description="text each shown row contains: trial id, "
                             "status, node, health or a config value (lr=0.1)"),
            OpenApiParameter("status", str, enum=list(STATUSES)),
            OpenApiParameter("unhealthy", str, enum=["0", "1"],
                             description="1: only trials with a firing incident"),
            OpenApiParameter("sort", str, description="one of " + ", ".join(FIXED_SORTS)
                             + ", or hp:<config key> (trial_id)"),
            OpenApiParameter("dir", str, enum=["asc", "desc"]),
            OpenApiParameter("metric", str, description="the metric of Best and Last "
                             "(the search's)"),
            OpenApiParameter("mode", str, enum=["min", "max"]),
            OpenApiParameter("page", {"type": "integer", "minimum": 1}),
            OpenApiParameter("page_size", {"type": "integer", "minimum": 1,
                                           "maximum": MAX_PAGE_SIZE},
                             description=f"rows a page ({PAGE_SIZE})"),
        ],
        responses={200: TablePageSerializer, 400: None, 404: None},
    )
    def get(self, request: Request, pk: int) -> Response:
        experiment = get_object_or_404(Experiment, pk=pk)
        try:
            query = TableQuery.from_params(request.query_params)
        except BadQuery as bad:
            raise ValidationError(bad.errors) from None
        return Response(jsonable(trial_table(experiment, query, timezone.now())))


def whole_number(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name, str(default))
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValidationError({name: f"a whole number from {low} to {high}"})
    return int(raw)
