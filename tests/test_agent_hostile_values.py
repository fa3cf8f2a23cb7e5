"""Values no NVML or /proc gives, in an agent's report: NaN and Infinity (Python's JSON
reads them), strings longer than raywatch keeps (SQLite ignores a column's max_length),
numbers past a column's range. Each refuses its batch by seq with the field named; the
group writer stores every other report sent with it, and the agent's other batches go
in when it sends them again. Runs on Postgres and on SQLite (test_on_embedded_default)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.utils import timezone

from collectors.agent import wire
from dashboard.agents import tokens
from dashboard.agents.ingest import BatchRefused, ingest_sent
from dashboard.agents.models import NodeProcess
from dashboard.gpus.models import Gpu, GpuSample
from tests.agents import batches, fact, gpu_record, report_body, sent

# On SQLite too: SQLite ignores max_length: checked on decode
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


@pytest.mark.parametrize(("field", "value", "said"), [
    ("utilization_gpu", math.nan, "utilization_gpu: expected a finite number, got nan"),
    ("power_w", math.inf, "power_w: expected a finite number, got inf"),
    ("temperature_c", -math.inf, "temperature_c: expected a finite number, got -inf"),
    ("name", "x" * 201, "name: at most 200 characters, got 201"),
    ("uuid", "GPU-" + "u" * 200, "uuid: at most 96 characters"),
    ("memory_used_bytes", 2**64, "memory_used_bytes: 18446744073709551616 is not within"),
    ("index", 70_000, "gpu_index: 70000 is not within 0..32767"),
])
def test_a_value_raywatch_cannot_keep_refuses_its_batch_and_nothing_else(
        field: str, value: Any, said: str) -> None:
    now = timezone.now()
    node_a, node_b = tokens.issue("gpu-a", None, now)[1], tokens.issue("gpu-b", None, now)[1]
    bad = {**gpu_record("GPU-a-1", index=1), field: value}
    body = batches([gpu_record("GPU-a-0")], [bad], [gpu_record("GPU-a-0")])
    refused, stored = ingest_sent([sent(node_a, body), sent(node_b, report_body(
        1, [gpu_record("GPU-b-0")]))], now)

    assert isinstance(refused, BatchRefused), refused
    assert (refused.status, refused.seq) == (400, 2)
    assert f"batch 2: gpu_poll.gpus[0].{said}" in refused.message, refused.message
    assert isinstance(stored, dict) and stored["stored"] == [1]  # the other agent's report

    # The agent drops batch 2 and sends the rest again: all of it is stored.
    again = {**body, "batches": [body["batches"][0], body["batches"][2]]}
    [answer] = ingest_sent([sent(node_a, again)], timezone.now())
    assert isinstance(answer, dict) and answer["stored"] == [1, 3], answer
    assert sorted(Gpu.objects.values_list("uuid", flat=True)) == ["GPU-a-0", "GPU-b-0"]
    assert GpuSample.objects.count() == 3
    assert not [s for s in GpuSample.objects.values_list("utilization_gpu", "power_w",
                                                         "temperature_c")
                if any(v is not None and not math.isfinite(v) for v in s)]


@pytest.mark.parametrize(("changes", "said"), [
    ({"cpu_percent": math.inf}, "cpu_percent: expected a finite number, got inf"),
    ({"create_time": math.nan}, "create_time: expected a finite number, got nan"),
    ({"title": "ray::" + "t" * 300}, "title: at most 200 characters, got 305"),
    ({"state": "SLEEPING"}, "state: at most 2 characters"),
    ({"pid": 2**40}, "pid: 1099511627776 is not within"),
])
def test_a_process_fact_raywatch_cannot_keep_refuses_its_batch(
        changes: dict[str, Any], said: str) -> None:
    token = tokens.issue("gpu-c", None, timezone.now())[1]
    body = batches([gpu_record("GPU-c-0")],
                   processes=[fact(4242), {**fact(4343), **changes}])
    [refused] = ingest_sent([sent(token, body)], timezone.now())
    assert isinstance(refused, BatchRefused) and refused.seq == 1, refused
    assert f"batch 1: processes.processes[1].{said}" in refused.message, refused.message
    assert not NodeProcess.objects.exists() and not Gpu.objects.exists()


@pytest.mark.parametrize(("writer", "said"), [
    (2**40, "trial_log.writer_pid: expected an integer from 1 to"),
    (-3, "trial_log.writer_pid: expected an integer from 1 to"),
    ("1234", "trial_log.writer_pid: expected an integer from 1 to"),
])
def test_a_run_writer_pid_raywatch_cannot_keep_refuses_its_batch(writer: Any, said: str
                                                                 ) -> None:
    from collectors.agent.trialwire import encode_trial_log
    from collectors.records import TrialUpdate
    from dashboard.trials.models import Trial

    now = timezone.now()
    token = tokens.issue("gpu-a", None, now)[1]
    run = TrialUpdate(experiment="verl_pair", experiment_dir="/r/verl_pair", trial_id="exp0",
                      trainable="", directory="/r/verl_pair", tensorboard=False,
                      framework="verl", writer_pid=4242)
    good = encode_trial_log(run, now)
    bad = {**encode_trial_log(run, now), "writer_pid": writer}

    def body(seq: int, record: dict[str, Any]) -> dict[str, Any]:
        at = good["at"]
        return {"version": wire.VERSION, "agent": {"version": "test"},
                "batches": [{"stream": "s1", "seq": seq, "at": at, "records": [record]}]}

    [refused] = ingest_sent([sent(token, body(1, bad))], now)
    assert isinstance(refused, BatchRefused) and refused.seq == 1, refused
    assert said in refused.message, refused.message
    assert not Trial.objects.exists()
    [answer] = ingest_sent([sent(token, body(2, good))], timezone.now())
    assert isinstance(answer, dict) and answer["stored"] == [2], answer
    assert Trial.objects.get(trial_id="exp0").writer_pid == 4242
