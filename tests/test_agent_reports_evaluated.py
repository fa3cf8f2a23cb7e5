"""A node agent's report reaches the detectors as soon as it is stored, not at the next
trial-log poll: here no poll runs at all, and the trial an agent says Tune ended is
shown ended, its incidents' rules run on it, within seconds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from collectors.agent import wire
from collectors.agent.trialwire import encode_trial_log
from collectors.records import ResultLine, TrialUpdate
from dashboard.agents import tokens
from dashboard.agents.ingest import decode_report, ingest_reports
from dashboard.trials.models import Trial
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.both_backends]


def report(update: TrialUpdate, seq: int) -> dict:
    now = datetime.now(UTC)
    return {"version": wire.VERSION,
            "agent": {"version": "test", "sent_at": wire.timestamp(now)},
            "batches": [{"stream": "s", "seq": seq, "at": wire.timestamp(now),
                         "records": [encode_trial_log(update, now)]}]}


def test_a_reported_end_is_evaluated_without_waiting_for_a_poll(settings) -> None:  # type: ignore[no-untyped-def]
    settings.EMBEDDED = True  # the evaluation runs in this process's background pool
    settings.CENTRAL_LOGS = False
    token = tokens.issue("gpu-7", None, timezone.now())[0]
    line = ResultLine(trial_id="t1", attempt=1, iteration=1, at=datetime.now(UTC),
                      time_this_iter_s=1.0, pid=4242, node_ip="10.0.0.7", hostname="gpu-7",
                      metrics={"score": 1.0}, byte_offset=0)
    update = TrialUpdate(experiment="search", experiment_dir="/r/search", trial_id="t1",
                         trainable="train", directory="/r/search/t1", tensorboard=False,
                         results=(line,), tune_status="RUNNING")
    ingest_reports([decode_report(token, report(update, 1))], timezone.now())
    wait_for(lambda: Trial.objects.get(trial_id="t1").status == Trial.RUNNING, 10,
             what="the reported trial evaluated RUNNING")

    ended = TrialUpdate(experiment="search", experiment_dir="/r/search", trial_id="t1",
                        trainable="train", directory="/r/search/t1", tensorboard=False,
                        tune_status="TERMINATED")
    ingest_reports([decode_report(token, report(ended, 2))], timezone.now())
    wait_for(lambda: Trial.objects.get(trial_id="t1").status == Trial.TERMINATED, 10,
             what="the reported end evaluated")
