from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from dashboard.core.pagination import PAGE_PARAMETERS, paginated
from dashboard.trials.models import Trial
from dashboard.trials.serializers import StepResultSerializer, TrialSerializer, trial_rows
from dashboard.trials.views_data import results_payload

STATUSES = ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR", "UNKNOWN")


def find_trial(trial_id: str) -> Trial:
    """Tune trial ids carry the experiment's random prefix, so they are unique in practice;
    the newest wins if two experiments ever share one."""
    trial = (Trial.objects.select_related("experiment").filter(trial_id=trial_id)
             .order_by("-first_seen_at").first())
    if trial is None:
        raise Http404(f"no trial {trial_id!r}")
    return trial


class TrialList(APIView):
    """Trials raywatch has found, with status, progress and health: newest experiment
    first, a page at a time (Link and X-Total-Count headers)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("experiment", str, description="experiment name"),
            OpenApiParameter("status", str, enum=list(STATUSES)),
            *PAGE_PARAMETERS,
        ],
        responses={200: TrialSerializer(many=True), 400: None},
    )
    def get(self, request: Request) -> Response:
        trials = Trial.objects.select_related("experiment").order_by("-experiment_id", "trial_id")
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
    def get(self, request: Request, trial_id: str) -> Response:
        raw = request.query_params.get("limit", "20000")
        if not raw.isdigit() or not 0 < int(raw) <= 100_000:
            raise ValidationError({"limit": "a whole number from 1 to 100000"})
        return Response(results_payload(find_trial(trial_id), int(raw)))
