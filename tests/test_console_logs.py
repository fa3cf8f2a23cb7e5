"""collectors.consolelogs reads the steps that verl, EasyR1 and OpenRLHF print to their
trainer actor's stdout (its Ray worker-*.out). Each framework's output is made here by a
copy of its own printing code (cited at each helper), with Ray's and the libraries' other
lines in between; read whole, read in pieces as a tail reads it, and read hostile."""

from __future__ import annotations

import io
import logging
import math
import numbers
import pprint
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import yaml

from collectors.consolelogs import MAX_METRICS, MAX_RECORD_BYTES, ConsoleStep, read_console
from collectors.records import EASYR1, OPENRLHF, VERL
from tests.rl_loggers import unflatten_dict, verl_console_line

# --- the frameworks' printing code, copied ------------------------------------------------


def verl_v04_concat_dict_to_str(dict: dict, step: Any) -> str:
    """volcengine/verl v0.4.0 (0758489422e8d41a89e6c36d4c477714520f0dcc), the same file and
    function: numbers as `:.3f`."""
    output = [f"step:{step}"]
    for k, v in dict.items():
        if isinstance(v, numbers.Number):
            output.append(f"{k}:{v:.3f}")
    output_str = " - ".join(output)
    return output_str


def easyr1_convert_dict_to_str(data: dict[str, Any]) -> str:
    """The same commit, verl/utils/py_functional.py, convert_dict_to_str."""
    return yaml.dump(data, indent=2)


class EasyR1ConsoleLogger:
    """The same commit, verl/utils/logger/logger.py, ConsoleLogger (print to `out` here)."""

    def __init__(self, config: dict[str, Any], out: io.StringIO) -> None:
        self.out = out
        print("Config\n" + easyr1_convert_dict_to_str(config), file=out)

    def log(self, data: dict[str, Any], step: int) -> None:
        print(f"Step {step}\n" + easyr1_convert_dict_to_str(unflatten_dict(data)),
              file=self.out)


class OpenRLHFNewLineFormatter(logging.Formatter):
    """OpenRLHF/OpenRLHF v0.11.0 (3c3be6234e0cb353e76bb8019947db9dfe99fca7),
    openrlhf/utils/logging_utils.py, NewLineFormatter with _FORMAT and _DATE_FORMAT, the
    formatter of its stdout handler."""

    def __init__(self, fmt: str, datefmt: str | None = None) -> None:
        logging.Formatter.__init__(self, fmt, datefmt)

    def format(self, record: logging.LogRecord) -> str:
        msg = logging.Formatter.format(self, record)
        if record.message != "":
            parts = msg.split(record.message)
            msg = msg.replace("\n", "\r\n" + parts[0])
        return msg


def openrlhf_logger(out: io.StringIO) -> logging.Logger:
    """logging_utils._setup_logger/init_logger, the handler on `out` instead of stdout."""
    handler = logging.StreamHandler(out)
    handler.setLevel(logging.INFO)
    handler.setFormatter(OpenRLHFNewLineFormatter(
        "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s",
        datefmt="%m-%d %H:%M:%S"))
    logger = logging.getLogger(f"openrlhf.test.{id(out)}")
    logger.setLevel(logging.DEBUG)
    logger.handlers = [handler]
    logger.propagate = False
    return logger


def openrlhf_log_step(logger: logging.Logger, global_step: int, status: dict) -> None:
    """The same commit, openrlhf/trainer/ppo_trainer.py, PPOTrainer.fit."""
    log_status = {k: v for k, v in status.items() if k not in ["generated_samples"]}
    logger.info(f"✨ Global step {global_step}: {log_status}")


def openrlhf_log_eval(logger: logging.Logger, global_step: int, logs: dict) -> None:
    """The same commit and file, PPOTrainer.evaluate."""
    time_str = "0:01:02"
    logger.info(f"✨ Evaluation completed in {time_str}, global_step {global_step}, "
                f"eval_metrics: {logs}")


# --- Ray's and the libraries' other lines --------------------------------------------------

NOISE = [
    ":actor_name:TaskRunner\n",
    "Training Progress:  33%|███▎      | 1/3 [00:05<00:10,  5.01s/it]\r"
    "Training Progress:  67%|██████▋   | 2/3 [00:10<00:05,  5.00s/it]\n",
    "/usr/lib/python3/dist-packages/torch/utils/data.py:12: UserWarning: step: this is: "
    "no step - a:1.0\n",
    "Traceback (most recent call last):\n"
    '  File "/app/verl/trainer/main_ppo.py", line 64, in run\n'
    "    step:2 - x:1.0\n"
    "ValueError: boom\n",
    "(WorkerDict pid=4711) INFO 08-13 19:25:45 Global step 7: {'a': 1.0}\n",
    "\n",
]


def noisy(records: list[str]) -> bytes:
    """The records, with every noise line before each and after the last."""
    return "".join("".join(NOISE) + record for record in [*records, ""]).encode()


def verl_metrics(step: int) -> dict[str, Any]:
    """What verl's RayPPOTrainer.fit logs at a step (numpy scalars among them, as
    reduce_metrics gives, and a string, which concat_dict_to_str leaves out)."""
    return {"timing_s/gen": 2.0 + step, "timing_s/reward": 0.5, "timing_s/step": 4.75,
            "critic/score/mean": np.float64(0.125 * step), "actor/entropy": np.float32(0.5),
            "response_length/max": np.int64(512), "training/epoch": 0, "note": "text"}


def verl_validation() -> dict[str, Any]:
    return {"val-core/openai/gsm8k/acc/mean@1": np.float64(0.25),
            "val-aux/openai/gsm8k/reward/mean@1": 0.375, "val-aux/num_turns/min": np.int32(2)}


def verl_output(concat: Callable[[dict, Any], str]) -> bytes:
    """RayPPOTrainer.fit with the console logger (verl/trainer/ppo/ray_trainer.py):
    `pprint(f"Initial validation metrics: {val_metrics}")`, then the step-0 line."""
    records = [pprint.pformat(f"Initial validation metrics: {verl_validation()}") + "\n",
               concat(verl_validation(), 0) + "\n"]
    records += [concat(verl_metrics(step), step) + "\n" for step in (1, 2, 3)]
    return noisy(records)


def easyr1_output() -> bytes:
    """EasyR1's RayPPOTrainer.fit: the logger prints the config at its start, _validate
    prints around the step-0 validation, steps 1..3, and the final validation."""
    out = io.StringIO()
    console = EasyR1ConsoleLogger({"trainer": {"project_name": "easy_r1", "logger":
                                               ["console"], "val_freq": 5}}, out)
    print("Start validation...", file=out)
    print("Finish validation.", file=out)
    validation = {"val/reward_score": 0.5, "val/accuracy_reward": np.float64(0.25),
                  "val_response_length/mean": np.float64(300.5)}
    console.log(validation, 0)
    records = [out.getvalue()]
    for step in (1, 2, 3):
        out = io.StringIO()
        console.out = out
        console.log({"timing_s/gen": 2.0 + step, "timing_s/reward": 0.01, "timing_s/step": 6.5,
                     "critic/score/mean": np.float64(0.125 * step),
                     "actor/kl_loss": np.float32(0.5), "actor/lr": 1e-06,
                     "reward/overall": np.float64(0.1 * step)}, step)
        records.append(out.getvalue())
    records.append("Final validation metrics:\n"
                   + easyr1_convert_dict_to_str(unflatten_dict(validation)) + "\n")
    return noisy(records)


def openrlhf_output() -> bytes:
    out = io.StringIO()
    logger = openrlhf_logger(out)
    logger.info("Sample: ['Global step 9: {\\'x\\': 1.0}', 1.0]")
    records = [out.getvalue()]
    for step in (1, 2, 3):
        out = io.StringIO()
        logger.handlers[0].setStream(out)  # type: ignore[attr-defined]
        openrlhf_log_step(logger, step, {
            "policy_loss": 0.25, "kl": 0.001 * step, "reward": 0.125 * step,
            "timing/generation": 3.0, "timing/make_experience": 1.0, "timing/ppo_train": 2.0,
            "timing/broadcast": 0.5, "timing/step_total": 6.5,
            "rollout/num_samples": 64.0, "generated_samples": ["text", 1.0]})
        if step == 2:
            openrlhf_log_eval(logger, step, {"eval_gsm8k_pass1": 0.5,
                                             "eval_num_samples": 100.0})
        records.append(out.getvalue())
    return noisy(records)


def read_all(framework: str, data: bytes) -> list[ConsoleStep]:
    steps, consumed = read_console(framework, data, at_end=True)
    assert consumed == len(data)
    return steps


def read_in_pieces(framework: str, data: bytes, sizes: list[int]) -> list[ConsoleStep]:
    """As the agent tails the file: it grows by `sizes`, each read from the cursor."""
    steps: list[ConsoleStep] = []
    cursor = written = 0
    for size in sizes:
        written = min(len(data), written + size)
        got, consumed = read_console(framework, data[cursor:written])
        assert 0 <= consumed <= written - cursor
        steps += got
        cursor += consumed
    got, consumed = read_console(framework, data[cursor:], at_end=True)
    assert consumed == len(data) - cursor
    return steps + got


def pieces(seed: int, total: int) -> list[int]:
    rng = random.Random(seed)
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(rng.choice([1, 2, 3, 7, 40, 97, 500]))
    return sizes


# --- the frameworks' own output ------------------------------------------------------------


def test_verl_steps_as_its_console_logger_prints_them() -> None:
    steps = read_all(VERL, verl_output(verl_console_line))

    assert [(s.step, s.validation) for s in steps] == [(0, True), (1, False), (2, False),
                                                       (3, False)]
    assert steps[0].metrics == {"val-core/openai/gsm8k/acc/mean@1": 0.25,
                                "val-aux/openai/gsm8k/reward/mean@1": 0.375,
                                "val-aux/num_turns/min": 2.0}
    assert steps[2].metrics == {"timing_s/gen": 4.0, "timing_s/reward": 0.5,
                                "timing_s/step": 4.75, "critic/score/mean": 0.25,
                                "actor/entropy": 0.5, "response_length/max": 512.0,
                                "training/epoch": 0.0}


def test_verl_before_v05_prints_three_decimals() -> None:
    steps = read_all(VERL, verl_output(verl_v04_concat_dict_to_str))

    assert [(s.step, s.validation) for s in steps] == [(0, True), (1, False), (2, False),
                                                       (3, False)]
    assert steps[3].metrics["critic/score/mean"] == 0.375
    assert steps[1].metrics["critic/score/mean"] == 0.125  # printed 0.125, as :.3f does
    assert steps[0].metrics["val-aux/openai/gsm8k/reward/mean@1"] == 0.375


def test_easyr1_steps_as_its_console_logger_prints_them() -> None:
    data = easyr1_output()
    assert b"!!python/object/apply:numpy" in data  # PyYAML's dump of numpy's scalars
    steps = read_all(EASYR1, data)

    assert [(s.step, s.validation) for s in steps] == [(0, True), (1, False), (2, False),
                                                       (3, False)]
    assert steps[0].metrics == {"val/accuracy_reward": 0.25, "val/reward_score": 0.5,
                                "val_response_length/mean": 300.5}
    assert steps[3].metrics == {
        "actor/kl_loss": 0.5, "actor/lr": 1e-06, "critic/score/mean": 0.375,
        "reward/overall": pytest.approx(0.3), "timing_s/gen": 5.0, "timing_s/reward": 0.01,
        "timing_s/step": 6.5}
    assert next(iter(steps[3].metrics)) == "actor/kl_loss"  # yaml.dump sorts the keys


def test_openrlhf_steps_as_its_trainer_logs_them() -> None:
    steps = read_all(OPENRLHF, openrlhf_output())

    assert [(s.step, s.validation) for s in steps] == [(1, False), (2, False), (2, True),
                                                       (3, False)]
    assert steps[0].metrics == {
        "policy_loss": 0.25, "kl": 0.001, "reward": 0.125, "timing/generation": 3.0,
        "timing/make_experience": 1.0, "timing/ppo_train": 2.0, "timing/broadcast": 0.5,
        "timing/step_total": 6.5, "rollout/num_samples": 64.0}
    assert steps[2].metrics == {"eval_gsm8k_pass1": 0.5, "eval_num_samples": 100.0}


@pytest.mark.parametrize("framework,output", [
    (VERL, lambda: verl_output(verl_console_line)),
    (EASYR1, easyr1_output),
    (OPENRLHF, openrlhf_output),
])
@pytest.mark.parametrize("seed", range(6))
def test_read_in_pieces_as_read_whole(framework: str, output: Callable[[], bytes],
                                      seed: int) -> None:
    data = output()
    assert read_in_pieces(framework, data, pieces(seed, len(data))) == read_all(framework, data)


@pytest.mark.parametrize("framework,output", [
    (VERL, lambda: verl_output(verl_console_line)),
    (EASYR1, easyr1_output),
    (OPENRLHF, openrlhf_output),
])
def test_a_record_cut_in_two_reads_is_read_once_whole(
        framework: str, output: Callable[[], bytes]) -> None:
    data = output()
    whole = read_all(framework, data)
    last = data.rindex({VERL: b"timing_s/step:", EASYR1: b"  step: 6.5",
                        OPENRLHF: b"timing/step_total"}[framework])
    record_start = data.rindex(b"\n", 0, last) + 1
    if framework == EASYR1:
        record_start = data.rindex(b"Step 3\n", 0, last)

    first, consumed = read_console(framework, data[:last])
    assert first == whole[:-1]
    assert consumed == record_start
    second, consumed_next = read_console(framework, data[consumed:])
    assert second == whole[-1:]
    assert consumed + consumed_next == len(data)


def test_an_easyr1_record_without_its_blank_line_waits() -> None:
    data = easyr1_output()
    end = data.rindex(b"Step 3\n")
    block_end = data.index(b"\n\n", end) + 1  # before print's own newline
    steps, consumed = read_console(EASYR1, data[:block_end])
    assert [s.step for s in steps] == [0, 1, 2]
    assert consumed == end

    steps, consumed = read_console(EASYR1, data[end:block_end], at_end=True)
    assert (steps, consumed) == ([], block_end - end)  # the process is gone: dropped


# --- hostile input --------------------------------------------------------------------------


def test_invalid_utf8_does_not_stop_the_reading() -> None:
    data = (b"\xff\xfe\x80 step:1 - a:1.0\n"
            b"step:2 - caf\xc3\xa9:0.5 - bad\xff:1.5 - \xed\xa0\x80:2.0\n"
            b"Step 5\nactor:\n  \xffkl: 0.5\n  lr: 1.0\n\n")
    steps = read_all(VERL, data)
    assert [(s.step, s.metrics) for s in steps] == [
        (2, {"café": 0.5, "bad\ufffd": 1.5, "\ufffd\ufffd\ufffd": 2.0})]
    steps = read_all(EASYR1, data)
    assert [(s.step, s.metrics) for s in steps] == [
        (5, {"actor/\ufffdkl": 0.5, "actor/lr": 1.0})]


@pytest.mark.parametrize("framework", [VERL, EASYR1, OPENRLHF])
def test_a_2mb_garbage_line_costs_only_itself(framework: str) -> None:
    garbage = b"step:9 - " + b"x" * (2 * MAX_RECORD_BYTES) + b"\n"
    data = {
        VERL: b"step:1 - a:1.0\n" + garbage + b"step:2 - a:2.0\n",
        EASYR1: b"Step 1\na: 1.0\n\nStep 9\n" + garbage + b"a: 9.0\n\nStep 2\na: 2.0\n\n",
        OPENRLHF: b"INFO x.py:1] Global step 1: {'a': 1.0}\n" + garbage
                  + b"INFO x.py:1] Global step 2: {'a': 2.0}\n",
    }[framework]
    assert [(s.step, s.metrics) for s in read_all(framework, data)] == [
        (1, {"a": 1.0}), (2, {"a": 2.0})]
    # Still being written, it is consumed all the same: never kept for ever.
    steps, consumed = read_console(framework, data[: data.index(garbage) + len(garbage) // 2])
    assert [s.step for s in steps] == [1]
    assert consumed == data.index(garbage) + len(garbage) // 2


def test_a_line_of_600_metrics_keeps_the_first_400() -> None:
    metrics = {f"m/{i:03d}": float(i) for i in range(600)}
    steps = read_all(VERL, (verl_console_line(metrics, 7) + "\n").encode())
    assert [s.step for s in steps] == [7]
    assert list(steps[0].metrics) == [f"m/{i:03d}" for i in range(MAX_METRICS)]

    out = io.StringIO()
    EasyR1ConsoleLogger({}, out).log(metrics, 7)
    steps = read_all(EASYR1, out.getvalue().encode())
    assert [len(s.metrics) for s in steps] == [MAX_METRICS]

    out = io.StringIO()
    openrlhf_log_step(openrlhf_logger(out), 7, metrics)
    steps = read_all(OPENRLHF, out.getvalue().encode())
    assert [len(s.metrics) for s in steps] == [MAX_METRICS]


def test_nan_and_inf_are_none() -> None:
    special = {"nan": float("nan"), "inf": float("inf"), "ninf": -float("inf"),
               "npnan": np.float64("nan"), "big": 10**400, "ok": 1.5}
    want = {"nan": None, "inf": None, "ninf": None, "npnan": None, "big": None, "ok": 1.5}
    line = verl_console_line(special, 1) + "\n"
    assert read_all(VERL, line.encode())[0].metrics == want
    # :.3f cannot format an int past a float's range at all.
    line = verl_v04_concat_dict_to_str({**special, "big": 10**300}, 1) + "\n"
    assert read_all(VERL, line.encode())[0].metrics == {**want, "big": 1e300}

    out = io.StringIO()
    EasyR1ConsoleLogger({}, out).log({**special, "big": 1e300 * 1e300}, 1)
    assert read_all(EASYR1, out.getvalue().encode())[0].metrics == want

    out = io.StringIO()
    openrlhf_log_step(openrlhf_logger(out), 1, special)
    assert read_all(OPENRLHF, out.getvalue().encode())[0].metrics == want


def test_strange_keys_and_values() -> None:
    long_key = "k" * 256
    line = verl_console_line(
        {long_key: 1.0, "a:b": 2.0, "x - y": 3.0, "ctl\x00": 4.0, "flag": True,
         "c": 1 + 2j, "neg": -0.5}, 3) + "\n"
    assert read_all(VERL, line.encode())[0].metrics == {
        "a:b": 2.0, "x - y": 3.0, "flag": 1.0, "c": None, "neg": -0.5}

    out = io.StringIO()
    EasyR1ConsoleLogger({}, out).log(
        {long_key: 1.0, "q/'quoted'": 2.0, "q/1": 3.0, "q/x: y": 3.5, "s/text": "a: b",
         "s/list": [1, 2], "s/same": np.float64(5.0), "k" * 130: 6.0,
         "z/true": np.bool_(True), "z/empty": {}, "z/f16": np.float16(0.5)}, 4)
    assert read_all(EASYR1, out.getvalue().encode())[0].metrics == {
        "q/'quoted'": 2.0, "q/1": 3.0, "q/x: y": 3.5, "s/same": 5.0, "z/f16": 0.5,
        "z/true": 1.0}
    # A string with a newline is dumped with a blank line in it: the step ends there, and
    # what followed is skipped up to the next step.
    out = io.StringIO()
    logger = EasyR1ConsoleLogger({}, out)
    logger.log({"a": 1.0, "b": "one\ntwo", "c": 3.0}, 5)
    logger.log({"a": 2.0}, 6)
    assert [(s.step, s.metrics) for s in read_all(EASYR1, out.getvalue().encode())] == [
        (5, {"a": 1.0}), (6, {"a": 2.0})]

    out = io.StringIO()
    openrlhf_log_step(openrlhf_logger(out), 5, {
        "a": "text, with: {brackets}", "b": {"nested": 1.0}, "c": [1, 2], 7: 1.0,
        "d": 2, "e\"'": 0.5, long_key: 1.0})
    assert read_all(OPENRLHF, out.getvalue().encode())[0].metrics == {"d": 2.0, "e\"'": 0.5}


@pytest.mark.parametrize("framework", [VERL, EASYR1, OPENRLHF, "someone-else"])
def test_hostile_bytes_never_raise(framework: str) -> None:
    rng = random.Random(1)
    alphabet = [b"step:", b"Step 1\n", b" - ", b":", b"\n", b"\n\n", b"  ", b"- ", b"{",
                b"}", b"'", b'"', b"\\", b"[", b"(", b"] Global step 3: {", b"nan", b"1.5",
                b"!!python/object/apply:numpy._core.multiarray.scalar", b"!!binary |",
                b"\xff", b"\r", b"a", b"/", b"9" * 30]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        for at_end in (False, True):
            steps, consumed = read_console(framework, data, at_end)
            assert 0 <= consumed <= len(data)
            assert all(len(s.metrics) <= MAX_METRICS for s in steps)
            assert all(v is None or math.isfinite(v) for s in steps for v in s.metrics.values())


def test_deep_nesting_and_long_numbers_stay_quick() -> None:
    deep_dict = b"INFO x.py:1] Global step 1: {'a': " + b"[" * 500_000 + b"]" * 500_000 + b"}\n"
    deep_yaml = b"Step 1\n" + b"".join(b" " * i + b"k:\n" for i in range(1200)) + b"\n"
    huge = b"step:1 - a:" + b"9" * 900_000 + b" - b:" + b"1" * 400 + b".5\n"
    assert read_all(OPENRLHF, deep_dict)[0].metrics == {}
    assert read_all(EASYR1, deep_yaml)[0].metrics == {}
    assert read_all(VERL, huge)[0].metrics == {"a": None, "b": None}  # past a float: inf


def test_easyr1_numpy_scalars_named_twice() -> None:
    """One dump writes a dtype once and names it again (`- *id001`); a numpy scalar that is
    one object under two keys is written once and aliased (`*id002`)."""
    shared = np.float32(0.5)
    out = io.StringIO()
    EasyR1ConsoleLogger({}, out).log({"a/x": shared, "a/y": np.float64(2.0),
                                      "b/x": shared, "b/y": np.float64(-3.0)}, 1)
    data = out.getvalue().encode()
    assert b"*id" in data
    assert read_all(EASYR1, data)[0].metrics == {"a/x": 0.5, "a/y": 2.0, "b/x": 0.5,
                                                 "b/y": -3.0}


def test_a_step_header_alone_is_no_record() -> None:
    assert read_all(EASYR1, b"Step 3\n\nStep 4\nnot yaml\nStep 5\n{}\n\n") == [
        ConsoleStep(step=5, metrics={}, validation=False)]


def test_an_unknown_framework_has_no_steps() -> None:
    assert read_console("someone-else", b"step:1 - a:1.0\n") == ([], 15)


# --- Ray Train's own log of each rank ------------------------------------------------------
def train_record(message: str, rank: object = 0, run: object = "sft", **more: object) -> bytes:
    """A line as Ray Train's JSONFormatter writes it to ray-train-app-worker-<id>.log (as
    read on Ray 2.60)."""
    import json

    record = {"asctime": "2026-12-07 18:10:50,794", "levelname": "INFO", "message": message,
              "filename": "context.py", "lineno": 390, "process": 6022, "job_id": "02000000",
              "run_name": run, "component": "worker", "world_rank": rank, "local_rank": 0,
              "node_rank": 0, "timestamp_ns": 1796667050794280455, **more}
    return json.dumps(record).encode() + b"\n"


def report(step: int, metrics: str, rank: int = 0) -> str:
    return (f"Reporting training result {step}: TrainingReport(checkpoint=None, "
            f"metrics={metrics}, validation=False) from rank {rank}")


def test_ray_trains_own_log_says_each_ranks_run_reports_and_world_size() -> None:
    from collectors.consolelogs import read_train_log

    data = (train_record("Setting up process group for: env:// [rank=0, world_size=4]")
            + train_record("using gloo")
            + train_record(report(1, "{'loss': 1.0, 'acc': np.float64(0.5), 'tag': 'x'}"))
            + train_record(report(2, "{'loss': tensor(0.5), 'nested': {'a': 1}}")))
    lines, used = read_train_log(data)
    assert used == len(data)
    assert [(x.run_name, x.rank, x.world_size, x.step) for x in lines] == [
        ("sft", 0, 4, None), ("sft", 0, None, 1), ("sft", 0, None, 2)]
    assert lines[1].metrics == {"loss": 1.0, "acc": 0.5} and lines[2].metrics == {"loss": 0.5}
    assert lines[1].at_ns == 1796667050794280455


def test_ray_train_log_lines_that_are_not_rays_cost_only_themselves() -> None:
    from collectors.consolelogs import read_train_log

    good = train_record(report(3, "{'loss': 0.25}"), rank=1)
    hostile = [
        b"Reporting training result 9: not json at all\n",
        train_record(report(4, "{'loss': 1}"), rank="0"),  # a rank that is no number
        train_record(report(4, "{'loss': 1}"), rank=True),
        train_record(report(4, "{'loss': 1}"), rank=-1),
        train_record(report(4, "{'loss': 1}"), run=""),
        train_record(report(4, "{'loss': 1}"), run=["x"]),
        train_record("Reporting training result x: TrainingReport(metrics={'a': 1})"),
        train_record(report(5, "{'loss': 1")),  # the dict never closes
        train_record(report(6, "{'a': 1}"), timestamp_ns="soon"),
        b"[" * 100_000 + b"Reporting training result \n",
        b'{"message": "Reporting training result 1: TrainingReport(metrics={})"}\n',
        b"\xff\xfe" + good,
        b"x" * (MAX_RECORD_BYTES + 10) + b"Reporting training result \n",
    ]
    lines, _ = read_train_log(b"".join([good, *hostile, good]))
    assert [(x.rank, x.step, x.metrics) for x in lines] == [
        (1, 3, {"loss": 0.25}), (0, 6, {"a": 1.0}), (1, 3, {"loss": 0.25})]
    assert lines[1].at_ns is None  # its timestamp was no number: no time, the step kept
    # A line still being written waits for its end; at the file's end it is dropped.
    assert read_train_log(good + good[:40]) == (read_train_log(good)[0], len(good))
    assert read_train_log(good[:40], at_end=True) == ([], 40)
