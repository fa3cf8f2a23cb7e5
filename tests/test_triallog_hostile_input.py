"""The trial-log reader against hostile and awkward input: nothing stops the tail,
nothing is read twice, and what could not be read is reported."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from collectors.tunelogs import (
    FileCursor,
    discover,
    read_error,
    read_experiment_state,
    read_params,
    tail_result_json,
    tail_tb_events,
)

TRIAL = "trainable_ab12c_00003_3_lr=0.1_2026-11-21_16-30-01"


def line(iteration: int, pid: int = 100, **extra: object) -> str:
    record = {"training_iteration": iteration, "trial_id": "ab12c_00003", "pid": pid,
              "timestamp": 1795280000 + iteration, "time_this_iter_s": 1.5, "score": iteration,
              "node_ip": "10.0.0.5", "hostname": "gpu-5", "done": False, "config": {"lr": 0.1},
              **extra}
    return json.dumps(record) + "\n"


def trial_dir(root: Path, experiment: str = "exp") -> Path:
    path = root / experiment / TRIAL
    path.mkdir(parents=True)
    return path


def tail(path: Path, cursor: FileCursor | None = None, **kw):  # type: ignore[no-untyped-def]
    return tail_result_json(path, cursor, "ab12c_00003", **kw)


def test_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    path = trial_dir(tmp_path) / "result.json"
    full = line(2)
    path.write_text(line(1) + full[:30])
    first = tail(path)
    assert [r.iteration for r in first.results] == [1]
    with path.open("a") as out:
        out.write(full[30:])
    second = tail(path, first.cursor)
    assert [r.iteration for r in second.results] == [2]
    assert second.results[0].metrics["score"] == 2.0


def test_garbage_lines_are_reported_and_later_lines_still_read(tmp_path: Path) -> None:
    path = trial_dir(tmp_path) / "result.json"
    with path.open("wb") as out:
        out.write(line(1).encode())
        out.write(b"\x00\xff\xfe binary garbage\n")
        out.write(b'{"training_iteration": 2, "score": "\xc3\x28"}\n')  # invalid UTF-8
        out.write(b"[1, 2, 3]\n")
        out.write(b'{"score": 5}\n')  # no training_iteration
        out.write(b'{"training_iteration": 3, "trial_id"\n')  # truncated
        out.write(line(4).encode())
    result = tail(path)
    assert [r.iteration for r in result.results] == [1, 4]
    messages = " | ".join(p.message for p in result.problems)
    assert len(result.problems) == 5
    for expected in ("not valid UTF-8", "not a JSON object", "no integer training_iteration",
                     "not JSON"):
        assert expected in messages


def test_ten_megabyte_line_is_skipped_once(tmp_path: Path) -> None:
    path = trial_dir(tmp_path) / "result.json"
    huge = json.dumps({"training_iteration": 2, "blob": "x" * (10 << 20)}) + "\n"
    path.write_text(line(1) + huge + line(3))
    cursor = None
    seen: list[int] = []
    problems = []
    for _ in range(4):  # the reader holds at most 1 MiB here, so it takes a few polls
        result = tail(path, cursor, max_bytes=1 << 20)
        cursor = result.cursor
        seen += [r.iteration for r in result.results]
        problems += result.problems
    assert seen == [1, 3]
    assert sum("longer than" in p.message for p in problems) == 1
    assert cursor and cursor.offset == path.stat().st_size


def test_nan_infinity_and_html_are_data_not_crashes(tmp_path: Path) -> None:
    path = trial_dir(tmp_path) / "result.json"
    path.write_text(
        '{"training_iteration": 1, "trial_id": "ab12c_00003", "loss": NaN, "reward": Infinity,'
        ' "<script>alert(1)</script>": 1.0, "info": {"kl": -Infinity, "lr": 0.001},'
        ' "flag": true}\n'
    )
    metrics = tail(path).results[0].metrics
    assert metrics["loss"] is None and metrics["reward"] is None
    assert metrics["info/kl"] is None and metrics["info/lr"] == 0.001
    assert metrics["<script>alert(1)</script>"] == 1.0  # kept as data; pages escape it
    assert "flag" not in metrics


def test_rewritten_whole_file_is_not_read_twice(tmp_path: Path) -> None:
    path = trial_dir(tmp_path) / "result.json"
    path.write_text(line(1) + line(2))
    first = tail(path)
    copy = tmp_path / "copy.json"
    copy.write_text(line(1) + line(2) + line(3))
    os.replace(copy, path)  # Tune's storage sync replaces the whole file
    second = tail(path, first.cursor)
    assert not second.reset
    assert [r.iteration for r in second.results] == [3]


def test_a_different_or_shorter_file_is_read_again(tmp_path: Path) -> None:
    path = trial_dir(tmp_path) / "result.json"
    path.write_text(line(1, score=1) + line(2))
    first = tail(path)
    path.write_text(line(1, score=99))
    again = tail(path, first.cursor)
    assert again.reset and again.results[0].metrics["score"] == 99


def test_retry_starts_a_new_attempt_across_polls(tmp_path: Path) -> None:
    path = trial_dir(tmp_path) / "result.json"
    path.write_text(line(1, pid=100) + line(2, pid=100))
    first = tail(path)
    with path.open("a") as out:
        out.write(line(1, pid=200) + line(2, pid=200))
    second = tail(path, first.cursor)
    assert [(r.attempt, r.iteration) for r in first.results] == [(1, 1), (1, 2)]
    assert [(r.attempt, r.iteration, r.pid) for r in second.results] == [(2, 1, 200),
                                                                           (2, 2, 200)]


def test_trial_dir_deleted_while_tailed(tmp_path: Path) -> None:
    directory = trial_dir(tmp_path)
    path = directory / "result.json"
    path.write_text(line(1))
    first = tail(path)
    shutil.rmtree(directory)
    gone = tail(path, first.cursor)
    assert gone.results == [] and gone.cursor.offset == first.cursor.offset
    assert read_error(directory / "error.txt") == (None, None)
    assert read_params(directory / "params.json") == (None, None)


def test_discovery_survives_symlink_loops_and_finds_live_copies(tmp_path: Path) -> None:
    stored = trial_dir(tmp_path / "ray_results")
    (stored / "result.json").write_text(line(1))
    (tmp_path / "ray_results" / "exp" / "loop").symlink_to(tmp_path / "ray_results")
    live = tmp_path / "artifacts" / "2026-11-21" / "exp" / "driver_artifacts" / TRIAL
    live.mkdir(parents=True)
    (live / "result.json").write_text(line(1))
    (live / "error.txt").write_text("Failure # 1\nRuntimeError: boom\n")
    found = discover([tmp_path / "ray_results", tmp_path / "artifacts", tmp_path / "missing"])
    assert sorted((d.experiment, d.trial_id, d.live) for d in found) == [
        ("exp", "ab12c_00003", False), ("exp", "ab12c_00003", True)]
    live_dir = next(d for d in found if d.live)
    assert read_error(Path(live_dir.error_file))[0].endswith("RuntimeError: boom")


def test_unreadable_params_and_state_are_reported_not_raised(tmp_path: Path) -> None:
    directory = trial_dir(tmp_path)
    (directory / "params.json").write_text("{not json")
    params, problem = read_params(directory / "params.json")
    assert params is None and problem and "unreadable" in problem.message
    (tmp_path / "exp" / "experiment_state-2026.json").write_text('{"trial_data": [["x", 1]]}')
    assert read_experiment_state(tmp_path / "exp") == {}


def test_a_params_json_too_large_to_parse_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Parsed whole, a config takes some 45 times its size (a 20 MiB params.json cost a
    node's agent ~943 MiB, past KubeRay's 256 Mi limit: issue 43, M7). One over 1 MiB is
    its trial's problem, not read; one just under is read."""
    directory = trial_dir(tmp_path)
    big = {f"k{i}": [i, {"a": i * 0.5}] for i in range(60_000)}  # ~1.5 MiB
    (directory / "params.json").write_text(json.dumps(big))
    params, problem = read_params(directory / "params.json")
    assert params is None and problem is not None
    assert "over the cap of 1 MiB: not read" in problem.message, problem.message
    fits = {f"k{i}": i for i in range(50_000)}  # under 1 MiB
    (directory / "params.json").write_text(json.dumps(fits))
    params, problem = read_params(directory / "params.json")
    assert problem is None and params is not None and len(params) == 50_000


def test_tensorboard_scalars_by_step_and_incremental(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    run = tmp_path / "grpo-run" / "actor"
    run.mkdir(parents=True)
    writer = EventFileWriter(str(run))

    def scalar(step: int, tag: str, value: float) -> None:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag,
                                                                         simple_value=value)])
        writer.add_event(event_pb2.Event(step=step, wall_time=1795280000.0 + step,
                                         summary=summary))

    scalar(1, "timing_s/gen", 2.0)
    scalar(1, "timing_s/reward", 1.0)
    writer.flush()
    found = discover([tmp_path])
    assert len(found) == 1 and found[0].trial_id is None and found[0].event_files
    path = Path(found[0].event_files[0])
    first = tail_tb_events(path, None, "actor")
    assert [(r.iteration, r.metrics) for r in first.results] == [
        (1, {"timing_s/gen": 2.0, "timing_s/reward": 1.0})]
    scalar(2, "timing_s/gen", 2.5)
    writer.flush()
    second = tail_tb_events(path, first.cursor, "actor")
    assert [(r.iteration, r.metrics) for r in second.results] == [(2, {"timing_s/gen": 2.5})]
    writer.close()
    with path.open("ab") as out:
        out.write(b"\x10\x00\x00")  # a record still being written
    third = tail_tb_events(path, second.cursor, "actor")
    assert third.results == [] and third.cursor.offset == second.cursor.offset


def test_big_tensorboard_records_cost_no_crc_unless_they_hold_a_scalar(  # type: ignore[no-untyped-def]
        tmp_path: Path, monkeypatch) -> None:
    """An image or histogram record raywatch drops costs no pure-Python CRC (0.31 CPU s a
    MiB: issue 43, L6); a large record that holds a scalar is still checked, and a
    damaged one is refused as a problem, its scalar not taken."""
    import struct

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    def record(data: bytes, damaged: bool = False) -> bytes:
        head = struct.pack("<Q", len(data))
        crc = masked_crc32c(data) ^ (1 if damaged else 0)
        return head + struct.pack("<I", masked_crc32c(head)) + data + struct.pack("<I", crc)

    def event(step: int, *values: summary_pb2.Summary.Value) -> bytes:
        return event_pb2.Event(step=step, wall_time=1795280000.0 + step,
                               summary=summary_pb2.Summary(value=list(values))
                               ).SerializeToString()

    image = summary_pb2.Summary.Value(tag="samples", image=summary_pb2.Summary.Image(
        encoded_image_string=b"\x89PNG" + b"x" * (4 << 20)))
    loss = summary_pb2.Summary.Value(tag="loss", simple_value=0.5)
    padded = summary_pb2.Summary.Value(tag="p" * 100, simple_value=1.0)
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(record(event(1, image)) + record(event(1, loss))
                     + record(event(2, image), damaged=True)  # an image: never looked at
                     + record(event(2, loss, *[padded] * 800), damaged=True)  # > 64 KiB
                     + record(event(3, loss)))
    checked: list[int] = []  # the sizes the reader computes a CRC of
    monkeypatch.setattr(pywrap_tensorflow, "masked_crc32c",
                        lambda data: checked.append(len(data)) or masked_crc32c(data))
    read = tail_tb_events(path, None, "actor", max_bytes=64 << 20)
    assert [(r.iteration, r.metrics.get("loss")) for r in read.results] == [
        (1, 0.5), (2, None), (3, 0.5)]  # step 2 from its image: no scalar taken
    assert [p.message for p in read.problems] == [
        "damaged TensorBoard record (its data's CRC does not match)"]
    assert max(checked) < 1 << 20, "an image's data had its CRC computed"
    assert any(size > 64 << 10 for size in checked)  # the large scalar record's was


AWKWARD_LINES = [
    line(1).encode(),
    b'{"training_iteration": 2, "loss": NaN, "r": Infinity, "k": -Infinity}',
    b'{"training_iteration": 3, "big": 123456789012345678901234567890, "x": 1e400}',
    b'{"training_iteration": 4, "\\ud800lone": 1.5, "s": "\\udfff"}',  # lone surrogates
    b'{"training_iteration": 5, "tab\\there": 1.0, "back\\\\slash": 2, "q\\"uote": 3}',
    b'{"training_iteration": 6, "nested": {"a": {"b": 0.5}}, "trial_id": 7}',
    b'{"training_iteration": 7, "dup": 1.0, "dup": 2.0}',
    b'{"training_iteration": 8, "nul\\u0000key": 1.0}',
    b'{"training_iteration": 9, "score": "\xc3\x28"}',  # invalid UTF-8
    b'"a JSON string"', b"null", b"[1, 2]", b"{not json", b"\xef\xbb\xbf{}",
    b'{"training_iteration": true}', b'{"training_iteration": 99999999999}',
]


def test_the_fast_parser_reads_every_line_as_the_stdlibs_does(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """raywatch reads result lines with orjson, and a node agent may run without it:
    both read every line alike, what orjson refuses (NaN, huge integers, lone surrogates)
    included, and word the same problems."""
    import collectors.tunelogs as tunelogs

    assert tunelogs.orjson is not None
    fast = [tunelogs.parse_result_line(raw, "ab12c_00003") for raw in AWKWARD_LINES]
    monkeypatch.setattr(tunelogs, "orjson", None)
    slow = [tunelogs.parse_result_line(raw, "ab12c_00003") for raw in AWKWARD_LINES]
    assert fast == slow
    assert [p["iteration"] for p in fast if isinstance(p, dict)] == list(range(1, 9))
    assert fast[1]["metrics"] == {"loss": None, "r": None, "k": None}
    assert fast[4]["metrics"] == {"tab\there": 1.0, "back\\slash": 2.0, 'q"uote': 3.0}
