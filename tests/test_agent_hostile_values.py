"""Values no NVML or /proc gives, in an agent's report: NaN and Infinity (Python's JSON
reads them), strings longer than raywatch keeps (SQLite ignores a column's max_length),
numbers past a column's range. A GPU's or a process's refuses its batch by seq with the
field named; the group writer stores every other report sent with it, and the agent's
other batches go in when it sends them again. A trial's record costs only itself: its
trial shows the problem, and the batch's other records are stored. Runs on Postgres and
on SQLite (test_on_embedded_default)."""

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


def test_lists_longer_than_any_node_has_refuse_their_batch() -> None:
    """Issue 43, L6: more GPUs than any node has, or more processes on one GPU, are no
    reading: the batch is refused by seq with the list named, as a bad value is."""
    now = timezone.now()
    token = tokens.issue("gpu-l", None, now)[1]
    many = batches([gpu_record(f"GPU-l-{i}", index=i) for i in range(wire.MAX_GPUS + 1)])
    [refused] = ingest_sent([sent(token, many)], now)
    assert isinstance(refused, BatchRefused), refused
    assert f"gpu_poll.gpus: at most {wire.MAX_GPUS} items" in refused.message
    crowded = {**gpu_record("GPU-l-0"), "processes": [
        {"pid": i + 1, "used_memory_bytes": 1} for i in range(wire.MAX_GPU_PROCESSES + 1)]}
    [refused] = ingest_sent([sent(token, batches([crowded]))], now)
    assert isinstance(refused, BatchRefused), refused
    assert f"at most {wire.MAX_GPU_PROCESSES}, got" in refused.message
    assert not Gpu.objects.exists()


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


@pytest.mark.parametrize(("changes", "said"), [
    ({"writer_pid": 2**40}, "trial_log.writer_pid: expected an integer from 1 to"),
    ({"writer_pid": -3}, "trial_log.writer_pid: expected an integer from 1 to"),
    ({"writer_pid": "1234"}, "trial_log.writer_pid: expected an integer from 1 to"),
    # An agent newer than its server: a framework it does not know yet.
    ({"framework": "areal"}, "trial_log.framework: one of tune"),
    ({"results": [{"iteration": 10**400}]}, "trial_log.results[0]"),
])
def test_a_trial_record_raywatch_cannot_keep_costs_only_itself(changes: dict[str, Any],
                                                               said: str) -> None:
    """One trial's record the server cannot read is that trial's visible problem; the
    other trials' records of the same batch are stored (issue 43, M5: one hostile line
    no longer drops its neighbours' results, which then looked stalled)."""
    from collectors.agent.trialwire import encode_trial_log
    from collectors.records import ResultLine, TrialUpdate
    from dashboard.trials.models import StepResult, Trial

    now = timezone.now()
    token = tokens.issue("gpu-a", None, now)[1]

    def run(trial_id: str) -> dict[str, Any]:
        line = ResultLine(trial_id=trial_id, attempt=1, iteration=1, at=now,
                          time_this_iter_s=1.0, pid=None, node_ip=None, hostname=None,
                          metrics={"loss": 0.5}, byte_offset=0)
        return encode_trial_log(TrialUpdate(
            experiment="verl_pair", experiment_dir="/r/verl_pair", trial_id=trial_id,
            trainable="", directory="/r/verl_pair", tensorboard=False, framework="verl",
            writer_pid=4242, results=(line,)), now)

    nameless = {**run("x"), "trial_id": 7}  # says no trial: counted, and nothing else
    records = [{**run("exp0"), **changes}, run("exp1"), nameless]
    body = {"version": wire.VERSION, "agent": {"version": "test"}, "batches": [
        {"stream": "s1", "seq": 1, "at": run("exp1")["at"], "records": records}]}
    [answer] = ingest_sent([sent(token, body)], now)
    assert isinstance(answer, dict) and answer["stored"] == [1], answer
    assert answer["skipped"] == {"trial_log refused": 2}, answer
    good = Trial.objects.get(trial_id="exp1")
    assert good.writer_pid == 4242 and StepResult.objects.filter(trial=good).count() == 1
    bad = Trial.objects.get(trial_id="exp0")
    assert bad.parse_errors == 1 and said in bad.last_parse_error, bad.last_parse_error
    assert bad.writer_pid is None and not StepResult.objects.filter(trial=bad).exists()
    assert not Trial.objects.filter(trial_id="x").exists()
