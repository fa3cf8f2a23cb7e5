"""A trial whose results only node agents send is not called stalled because its agents
went quiet (an agent stopped, the network between, raywatch restarted before the
agents reconnected): its silence is counted up to their last report. Once they report
again, or after SILENCE_HOLD_MAX_S, the clock counts; a real hang is still caught."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from collectors.agent import wire
from dashboard.agents.ingest import decode_report, ingest_reports
from dashboard.agents.models import AgentStream, NodeToken
from dashboard.incidents.models import Incident
from dashboard.trials.detect import SILENCE_HOLD_MAX_S
from dashboard.trials.tasks import poll_trial_logs
from tests.test_incremental_detection import (
    STALL_MIN_S,
    Clock,
    name,
    ray_answered,
    running_search,
)

TRIALS = 3


@pytest.fixture
def search(transactional_db: None, settings: Any,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """Three RUNNING trials whose results the agents of gpu-0, gpu-1, gpu-2 send."""
    yield from running_search(TRIALS, settings, monkeypatch)


def agents_reported(at: datetime) -> None:
    """The agents' last stored report, of every node the trials' results came from."""
    for n in range(TRIALS):
        token = NodeToken.objects.create(node=f"gpu-{n}", token_hash=f"{n:064x}",
                                         prefix=f"rwa_{n:08d}", created_at=at)
        AgentStream.objects.create(token=token, stream="s", last_seq=1, updated_at=at)


def stalled(clock: Clock) -> set[str]:
    ray_answered(clock.now)
    poll_trial_logs()
    return set(Incident.objects.filter(kind="trial_stalled", state=Incident.FIRING)
               .values_list("subject", flat=True))


def test_quiet_agents_hold_the_stall_until_they_report_again(search: Clock) -> None:
    clock = search
    agents_reported(clock.now)
    clock.now += timedelta(seconds=STALL_MIN_S + 60)  # no result, and no report either
    assert stalled(clock) == set()
    # The agents come back with nothing new: the trials really are silent.
    AgentStream.objects.update(updated_at=clock.now)
    clock.now += timedelta(seconds=2)
    assert stalled(clock) == {f"trial:big_asha/{name(n)}" for n in range(TRIALS)}
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "counted to its node agent" not in summary


def test_a_stall_before_the_agents_went_quiet_is_still_caught(search: Clock) -> None:
    clock = search
    clock.now += timedelta(seconds=STALL_MIN_S + 30)
    agents_reported(clock.now)  # they reported until now: the trials were silent by then
    clock.now += timedelta(seconds=60)
    found = stalled(clock)
    assert found == {f"trial:big_asha/{name(n)}" for n in range(TRIALS)}
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "counted to the newest data raywatch has, 60 s old" in summary


def backlog_report(token: NodeToken, seq: int, age_s: float) -> dict[str, Any]:
    """A report whose only batch was polled `age_s` before the agent sent it, by an
    agent clock an hour ahead of raywatch's (only the difference counts)."""
    agent_now = datetime.now(UTC) + timedelta(hours=1)
    at = wire.timestamp(agent_now - timedelta(seconds=age_s))
    return {"version": wire.VERSION,
            "agent": {"version": "test", "sent_at": wire.timestamp(agent_now)},
            "batches": [{"stream": "s", "seq": seq, "at": at, "records": []}]}


def test_an_agent_sending_its_backlog_holds_the_stall_until_it_is_in(search: Clock) -> None:
    """After an outage the agents reconnect and send what they spooled, oldest first:
    their first reports are recent, their data is not. The stall waits for the data."""
    clock = search
    agents_reported(clock.now)
    clock.now += timedelta(seconds=STALL_MIN_S + 300)  # an outage of 5 minutes and more
    tokens = list(NodeToken.objects.all())
    ingest_reports([decode_report(t, backlog_report(t, 2, 330)) for t in tokens], clock.now)
    assert stalled(clock) == set()  # reported just now, but only up to 330 s ago
    clock.now += timedelta(seconds=5)
    ingest_reports([decode_report(t, backlog_report(t, 3, 0)) for t in tokens], clock.now)
    assert stalled(clock) == {f"trial:big_asha/{name(n)}" for n in range(TRIALS)}


def test_agents_gone_for_good_hold_nothing_past_the_limit(search: Clock) -> None:
    clock = search
    agents_reported(clock.now)
    clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S + 1)
    assert len(stalled(clock)) == TRIALS
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "its node agent (gpu-" in summary and "has sent nothing newer than" in summary


def test_trials_raywatch_reads_itself_are_never_held(search: Clock, settings: Any) -> None:
    clock = search
    settings.CENTRAL_LOGS = True
    from dashboard.trials.models import Experiment

    Experiment.objects.update(paths=["/home/u/ray_results/big_asha"])
    agents_reported(clock.now)
    clock.now += timedelta(seconds=STALL_MIN_S + 60)
    assert len(stalled(clock)) == TRIALS
