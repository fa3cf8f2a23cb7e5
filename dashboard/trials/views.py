from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from dashboard.cluster.models import Job
from dashboard.cluster.scope import page_cluster
from dashboard.core.roles import OPERATOR, has_role
from dashboard.core.views import viewer_required
from dashboard.incidents.trial_rules import NOT_A_PHASE
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.objective import objective_of
from dashboard.trials.roots import log_roots
from dashboard.trials.runs import is_run
from dashboard.trials.stacks import latest_stack, stack_payload
from dashboard.trials.table import BadQuery, TableQuery, trial_table
from dashboard.trials.views_data import (
    experiments_payload,
    incidents_payload,
    jsonable,
    results_payload,
    run_calls_payload,
    run_job,
    train_run_payload,
    trial_payload,
)

SILENT_AFTER_S = 60.0


@viewer_required
def experiments_page(request: HttpRequest) -> HttpResponse:
    scope = page_cluster(request)
    return render(request, "trials/experiments.html", {
        "page_data": {"experiments": experiments_payload(scope.name if scope else None),
                      "server_now": timezone.now().isoformat()},
        "central_logs": settings.CENTRAL_LOGS,
        "watched": [str(p) for p in log_roots()] if settings.CENTRAL_LOGS else []})


@viewer_required
def experiment_page(request: HttpRequest, pk: int) -> HttpResponse:
    """The first page of the trial table, as the address asks (the page keeps its
    filters and sort there); an address that cannot be used shows the first page."""
    experiment = get_object_or_404(Experiment, pk=pk)
    try:
        query = TableQuery.from_params(request.GET)
    except BadQuery:
        query = TableQuery()
    return render(request, "trials/experiment.html", {
        "experiment": experiment,
        "page_data": jsonable(trial_table(experiment, query, timezone.now())),
    })


@viewer_required
def trial_page(request: HttpRequest, pk: int) -> HttpResponse:
    trial = get_object_or_404(Trial.objects.select_related("experiment"), pk=pk)
    job = run_job(trial)  # an RL run's trainer's Ray job: its calls now, its Stop
    return render(request, "trials/trial.html", {
        "trial": trial,
        "page_data": {"trial": trial_payload(trial), "results": results_payload(trial),
                      "timing_keys": settings.TIMING_KEYS,
                      "not_a_phase": NOT_A_PHASE,
                      "stack": stack_payload(latest_stack(trial)),
                      "calls": run_calls_payload(trial, job),
                      "train": train_run_payload(trial),
                      "incidents": incidents_payload([trial.pk])[trial.pk],
                      "objective": objective_of(trial.experiment, trial.metric_range).as_dict(),
                      "server_now": timezone.now().isoformat(),
                      # "silent for N min" from here on (and three of its steps)
                      "silent_after_s": min(SILENT_AFTER_S, settings.STALL_MIN_S)},
        "can_act": has_role(request.user, OPERATOR),
        "noun": "Run" if is_run(trial) else "Trial",  # an RL run (verl, EasyR1, OpenRLHF)
        "stop_job": stoppable_job(job),
    })


def stoppable_job(job: tuple[int, str] | None) -> str:
    """An RL run's trainer's Ray job (run_job), when it was submitted through Ray's Jobs
    API and still runs: its submission id, for the page's Stop (the same audited action
    as the Jobs page's, which ends every actor of the run). "" otherwise: Terminate ends
    the trainer's process, and its driver and job with it."""
    if job is None:
        return ""
    return Job.objects.filter(cluster_id=job[0], job_id=job[1], status__in=Job.RUNNING_STATES
                              ).exclude(submission_id="").values_list(
        "submission_id", flat=True).first() or ""
