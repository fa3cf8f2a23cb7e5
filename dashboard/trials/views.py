from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from dashboard.core.roles import OPERATOR, has_role
from dashboard.core.views import viewer_required
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.views_data import (
    experiment_trials_payload,
    experiments_payload,
    results_payload,
    trial_payload,
)


@viewer_required
def experiments_page(request: HttpRequest) -> HttpResponse:
    return render(request, "trials/experiments.html", {"experiments": experiments_payload()})


@viewer_required
def experiment_page(request: HttpRequest, pk: int) -> HttpResponse:
    experiment = get_object_or_404(Experiment, pk=pk)
    return render(request, "trials/experiment.html", {
        "experiment": experiment, "trials": experiment_trials_payload(experiment),
    })


@viewer_required
def trial_page(request: HttpRequest, pk: int) -> HttpResponse:
    trial = get_object_or_404(Trial.objects.select_related("experiment"), pk=pk)
    return render(request, "trials/trial.html", {
        "trial": trial,
        "page_data": {"trial": trial_payload(trial), "results": results_payload(trial),
                      "timing_keys": settings.TIMING_KEYS},
        "can_act": has_role(request.user, OPERATOR),
    })
