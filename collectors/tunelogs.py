"""Trial logs: Ray Tune's result.json, params.json, error.txt and experiment state,
and TensorBoard event files (RL/LLM training runs that log there, OpenRLHF/verl style).

fetch side: collectors.logscan finds the trial directories (discover() and TrialDir
are re-exported here); tail_*() read only the bytes added since a FileCursor. Parsing
is pure (parse_result_line). Nothing here raises on hostile input: bad lines become
ParseProblems and the tail goes on. Every file is opened through collectors.rootfiles,
held to the root it was found under (`root`; None: its own directory): a link, a FIFO
or a file over its cap is a ParseProblem too. Values a file nests past MAX_NESTING are
not read (Python's recursion would stop the reader).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import struct
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from math import isfinite
from pathlib import Path
from typing import Any

try:  # a node agent may run without it: the stdlib's parser, ~3x slower, then
    import orjson
except ImportError:  # pragma: no cover
    orjson = None

from collectors.logscan import discover as discover
from collectors.records import ResultLine
from collectors.records import TrialDir as TrialDir
from collectors.rootfiles import DEFAULT_CAPS, Caps, Root, open_file, problem_text, read_file
from collectors.rootfiles import storable as storable
from collectors.runformats import step_seconds
from collectors.tunesearch import (
    TUNER_FILE,
    SearchObjective,
    combine,
    read_tuner,
    runner_metric,
)

log = logging.getLogger("raywatch.trial_logs")
HEAD_BYTES = 4096
MAX_LINE_BYTES = 8 << 20  # a longer result.json line (TensorBoard record) is skipped
MAX_NESTING = 64  # deeper objects in a result line are not metrics; params.json: refused
ERROR_HEAD_BYTES = 64 << 10
MAX_KEY = 200
MAX_INT = 2**31 - 1  # iterations and pids are stored in 32-bit columns
MAX_METRICS = 500
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Tune's bookkeeping keys: not metrics (time_this_iter_s and time_total_s are kept).
BOOKKEEPING = {
    "config", "trial_id", "date", "hostname", "node_ip", "pid", "timestamp", "done",
    "checkpoint_dir_name", "training_iteration", "experiment_id", "experiment_tag",
    "should_checkpoint", "time_since_restore", "iterations_since_restore",
    "timesteps_since_restore", "episodes_total", "timesteps_total",
}


@dataclass(frozen=True)
class FileCursor:
    path: str
    offset: int = 0
    head_hash: str | None = None
    attempt: int = 1
    last_iteration: int | None = None
    last_pid: int | None = None


@dataclass(frozen=True)
class ParseProblem:
    path: str
    byte_offset: int
    message: str


@dataclass(frozen=True)
class TailResult:
    cursor: FileCursor
    results: list[ResultLine] = field(default_factory=list)
    problems: list[ParseProblem] = field(default_factory=list)
    reset: bool = False


@dataclass(frozen=True, slots=True)  # one per trial of every experiment read: no __dict__
class TuneTrialState:
    status: str
    num_failures: int | None
    last_result_time: float | None


# --- result.json ------------------------------------------------------------------------
def tail_result_json(path: Path, cursor: FileCursor | None, trial_id_hint: str | None,
                     max_bytes: int = MAX_LINE_BYTES, max_line: int | None = None,
                     root: Root | None = None) -> TailResult:
    """The complete lines added since `cursor`: about `max_bytes` of them (more when one
    line is longer, up to `max_line`; a line longer than that is skipped)."""
    return tail_lines(path, cursor, partial(parse_result_line, trial_id_hint=trial_id_hint),
                      max_bytes, max_line, root)


def tail_lines(path: Path, cursor: FileCursor | None,
               parse: Callable[[bytes], dict[str, Any] | str],
               max_bytes: int = MAX_LINE_BYTES, max_line: int | None = None,
               root: Root | None = None, restarts: bool = False) -> TailResult:
    """A JSON-lines file's complete lines added since `cursor`, each read by `parse`
    (its fields, or why it cannot be used). `restarts`: the file is a run's log that its
    program truncates when it starts again (verl's and EasyR1's loggers): a file that
    shrank or starts differently is then a new attempt, as is a step lower than the one
    before it; else (Tune's result.json, which Tune's sync rewrites whole) it is read
    again from the start, and an iteration that does not go up or a new pid is a retry."""
    max_line = max(max_line or max_bytes, max_bytes)
    cursor = cursor or FileCursor(str(path))
    handle = _open(path, root, _caps(root).log_bytes, cursor)
    if isinstance(handle, TailResult):
        return handle
    with handle:
        size = os.fstat(handle.fileno()).st_size
        cursor, reset = _check_head(handle, cursor, size, restarts)
        handle.seek(cursor.offset)
        results: list[ResultLine] = []
        problems: list[ParseProblem] = []
        offset = cursor.offset
        lines, skip_to = _complete_lines(handle, offset, size, max_bytes, max_line)
        if skip_to is not None:
            problems.append(ParseProblem(str(path), offset, (
                f"a line longer than {max_line} bytes was skipped" if skip_to >= 0 else
                f"a line longer than {max_line} bytes has no end yet: skipped once it has")))
            offset = max(offset, skip_to)
        attempts = _Attempts(cursor.attempt, cursor.last_iteration, cursor.last_pid, restarts)
        for start, raw in lines:
            offset = start + len(raw) + 1
            if not raw.strip():
                continue
            parsed = parse(raw)
            if isinstance(parsed, str):
                problems.append(ParseProblem(str(path), start, parsed))
                continue
            results.append(_line(parsed, attempts.next(parsed), start))
        cursor = replace(cursor, attempt=attempts.attempt, last_iteration=attempts.iteration,
                         last_pid=attempts.pid)
        # A head already checked whole (HEAD_BYTES of it) is the same head: not read again.
        head = (cursor.head_hash if cursor.offset >= HEAD_BYTES and cursor.head_hash
                else _head_hash(handle, offset))
        cursor = replace(cursor, offset=offset, head_hash=head)
    return TailResult(cursor, results, problems, reset)


def _open(path: Path, root: Root | None, cap: int, cursor: FileCursor) -> Any:
    """The file open for a tail, or the TailResult that says why not."""
    try:
        return open_file(path, root, cap)
    except FileNotFoundError:
        return TailResult(cursor)  # deleted while we looked: nothing to read, nothing lost
    except OSError as exc:
        return TailResult(cursor, problems=[ParseProblem(str(path), cursor.offset,
                                                         problem_text(exc))])


def _caps(root: Root | None) -> Caps:
    return root.caps if root else DEFAULT_CAPS


def _check_head(handle: Any, cursor: FileCursor, size: int,
                restarts: bool = False) -> tuple[FileCursor, bool]:
    """A file replaced by a copy with the same beginning (Tune's sync) is read on;
    one that shrank or starts differently is read again from the start: as a new attempt
    where that means its program `restarts`. `size`: the open file's."""
    if cursor.offset == 0:
        return cursor, False
    if size >= cursor.offset and _head_hash(handle, cursor.offset) == cursor.head_hash:
        return cursor, False
    return FileCursor(cursor.path, attempt=cursor.attempt + 1 if restarts else 1), True


def _head_hash(handle: Any, upto: int) -> str:
    handle.seek(0)
    digest = hashlib.sha1(handle.read(min(upto, HEAD_BYTES))).hexdigest()
    return digest


def _complete_lines(handle: Any, offset: int, size: int, max_bytes: int,
                    max_line: int) -> tuple[list[tuple[int, bytes]], int | None]:
    """Complete lines from `offset`; a partial last line is left for the next poll.
    A line longer than max_line is skipped whole once its end is seen: the second
    value is where reading resumes after it (-1: it has no end yet)."""
    # No more than the file holds: a read of max_bytes (256 KiB) allocates all of it first,
    # for the few hundred bytes a live trial adds a poll.
    data = handle.read(max(0, min(max_bytes, size - offset)))
    if len(data) >= max_bytes and b"\n" not in data and max_line > max_bytes:
        data += handle.read(max_line - len(data))  # one long line: read it whole
    lines: list[tuple[int, bytes]] = []
    pos = 0
    while (end := data.find(b"\n", pos)) >= 0:
        lines.append((offset + pos, data[pos:end]))
        pos = end + 1
    skip_to = None
    if pos == 0 and len(data) >= max_line:
        skip_to = _skip_long_line(handle, offset + len(data))
    return lines, skip_to


def _skip_long_line(handle: Any, position: int) -> int:
    """Where the line that goes on at `position` ends; -1 while it has no end (still
    being written: look again next time). Read no further than the file's cap allows."""
    handle.seek(position)
    while chunk := handle.read(1 << 20):
        end = chunk.find(b"\n")
        if end >= 0:
            return position + end + 1
        position += len(chunk)
    return -1


def parse_result_line(raw: bytes, trial_id_hint: str | None) -> dict[str, Any] | str:
    """One result.json line -> its fields, or a short reason why it cannot be used."""
    read = object_with_count(raw, "training_iteration")
    if isinstance(read, str):
        return read
    obj, iteration = read
    trial_id = obj.get("trial_id") if isinstance(obj.get("trial_id"), str) else trial_id_hint
    if not trial_id:
        return "line has no trial_id"
    return {
        "trial_id": trial_id[:255], "iteration": iteration,
        "at": epoch_time(obj.get("timestamp")),
        "time_this_iter_s": _number(obj.get("time_this_iter_s")),
        "pid": _pid(obj.get("pid")),
        "node_ip": _text(obj.get("node_ip")), "hostname": _text(obj.get("hostname")),
        "metrics": flatten_metrics(obj),
    }


def object_with_count(raw: bytes, key: str) -> tuple[dict[str, Any], int] | str:
    """A line that is a JSON object with an integer `key` in range (Tune's
    training_iteration, an RL logger's step): the object and that count, or why not."""
    obj = loads_line(raw)
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        return "line is not a JSON object"
    count = obj.get(key)
    if not isinstance(count, int) or isinstance(count, bool):
        return f"line has no integer {key}"
    if not -MAX_INT <= count <= MAX_INT:
        return f"line's {key} is out of range"
    return obj, count


def loads_line(raw: bytes) -> Any:
    """The line's JSON value; a str is the reason it has none. orjson reads most lines;
    what it refuses (NaN and Infinity, which Tune writes; integers past 64 bits; lone
    surrogates; anything malformed) goes through the stdlib's parser, which accepts the
    first three and words the reason for the rest."""
    if orjson is not None:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            return value if not isinstance(value, str) else None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "line is not valid UTF-8"
    try:
        value = json.loads(text)
        if _SURROGATE.search(text):  # Postgres stores no lone surrogate: none is kept
            value = json_safe(value)
    except (ValueError, RecursionError):
        return f"line is not JSON: {storable(text[:80])!r}"
    return value if not isinstance(value, str) else None


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def flatten_metrics(obj: dict[str, Any], prefix: str = "", depth: int = 1,
                    skip: Collection[str] = BOOKKEEPING) -> dict[str, float | None]:
    """Numbers by name, nested objects' names joined with "/" (EasyR1's nested lines and
    verl's flat keys name a metric alike: timing_s/gen); `skip`: top-level keys that are
    no metrics."""
    out: dict[str, float | None] = {}
    for key, value in obj.items():
        if not prefix and key in skip:
            continue
        name = prefix + key if prefix else key
        if "\x00" in name or len(name) > MAX_KEY:
            name = name.replace("\x00", "")[:MAX_KEY]  # Postgres rejects NUL
        if type(value) is float:  # most metrics: the checks below, cheaper
            out[name] = value if isfinite(value) else None
        elif isinstance(value, dict):
            if depth < MAX_NESTING:
                out.update(flatten_metrics(value, f"{name}/", depth + 1))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = _number(value)
        if len(out) >= MAX_METRICS:
            break
    return out


@dataclass
class _Attempts:
    """A retried trial appends to the same file: its iteration restarts and its pid
    changes. Kept as the lines of one read go by (a cursor copied a line cost more than
    parsing the line's numbers)."""

    attempt: int
    iteration: int | None
    pid: int | None
    steps_only: bool = False  # a run's log: only a step lower than the last is a restart

    def next(self, parsed: dict[str, Any]) -> int:
        """The attempt this line belongs to."""
        iteration, pid = parsed["iteration"], parsed["pid"]
        restarted = self.iteration is not None and (
            iteration < self.iteration if self.steps_only else iteration <= self.iteration)
        new_pid = self.pid is not None and pid not in (None, self.pid)
        if restarted or new_pid:
            self.attempt += 1
        self.iteration = iteration
        self.pid = pid if pid is not None else self.pid
        return self.attempt


def _line(parsed: dict[str, Any], attempt: int, start: int) -> ResultLine:
    return ResultLine(attempt=attempt, byte_offset=start, **parsed)


def _number(value: Any) -> float | None:
    if type(value) is float:  # most: the checks below, cheaper
        return value if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return None
    return number if math.isfinite(number) else None


def _pid(value: Any) -> int | None:
    valid = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_INT
    return value if valid else None


def epoch_time(value: Any) -> datetime | None:
    """A time written as seconds since the epoch (Tune's `timestamp`, a TensorBoard
    event's wall time, the Train callback's `time`); None when it is no such time."""
    number = _number(value)
    if number is None or not 0 < number < 1e11:
        return None
    return EPOCH + timedelta(seconds=number)  # fromtimestamp(tz=UTC): 10x the time


def _text(value: Any) -> str | None:
    return value.replace("\x00", "")[:255] if isinstance(value, str) else None


def json_safe(value: Any) -> Any:
    """What Postgres jsonb accepts: no NaN/Infinity (Tune writes them), no NUL characters,
    no lone surrogates. Recursive: for values checked against MAX_NESTING."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {storable(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


# --- TensorBoard event files ------------------------------------------------------------------
def tail_tb_events(path: Path, cursor: FileCursor | None, trial_id: str,
                   max_bytes: int = 8 << 20, root: Root | None = None) -> TailResult:
    """Scalars by step, from TFRecords read here (a record's length is the file's word:
    the tensorboard package's reader would allocate whatever it says)."""
    from tensorboard.compat.proto import event_pb2

    cursor = cursor or FileCursor(str(path))
    handle = _open(path, root, _caps(root).log_bytes, cursor)
    if isinstance(handle, TailResult):
        return handle
    with handle:
        size = os.fstat(handle.fileno()).st_size
        cursor, reset = _check_head(handle, cursor, size)
        handle.seek(cursor.offset)
        steps: dict[int, dict[str, Any]] = {}
        problems: list[ParseProblem] = []
        offset = cursor.offset
        while offset - cursor.offset < max_bytes:
            record, end, problem, unchecked = _tf_record(handle, offset, size)
            if problem:
                problems.append(ParseProblem(str(path), offset, problem))
            if end == offset:
                break  # the end, a record still being written, or damage
            if record is not None:
                _add_event(steps, record, event_pb2, problems, str(path), offset, unchecked)
            offset = end
        cursor = replace(cursor, offset=offset, head_hash=_head_hash(handle, offset))
    results = [
        ResultLine(trial_id=trial_id, attempt=1, iteration=step, at=item["at"],
                   time_this_iter_s=step_seconds(item["metrics"]), pid=None, node_ip=None,
                   hostname=None,
                   metrics=item["metrics"], byte_offset=item["offset"])
        for step, item in sorted(steps.items())
    ]
    return TailResult(cursor, results, problems, reset)


# A record's data up to this size has its CRC checked as it is read; a larger one (an
# image, a histogram: raywatch reads none) only when it turns out to hold a scalar. The
# CRC is pure Python here, 0.31 CPU s a MiB: a job writing 8 MiB records would cost its
# node's agent seconds a record for data it then drops (issue 43, L6).
CRC_AT_ONCE = 64 << 10


def _tf_record(handle: Any, offset: int, size: int
               ) -> tuple[bytes | None, int, str | None, int | None]:
    """The TFRecord at `offset` (the handle is there): length (8 bytes) and its masked
    CRC-32C (4), data, the data's CRC (4). (data, its end, None, the data's CRC if not yet
    checked: over CRC_AT_ONCE); (None, its end, why, None) for one too long to read,
    skipped; (None, offset, why or None, None) where reading stops: the end, a record
    still being written, damage."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    header = handle.read(12)
    if len(header) < 12:
        return None, offset, None, None
    (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
    if masked_crc32c(header[:8]) != crc:
        return None, offset, "damaged TensorBoard record (its length's CRC does not match)", \
            None
    end = offset + 16 + length
    if length > MAX_LINE_BYTES:  # not read: skipped once it is all there
        if end > size:
            return None, offset, f"a TensorBoard record of {length} bytes is not whole yet", \
                None
        handle.seek(end)
        return None, end, f"a TensorBoard record of {length} bytes was skipped", None
    if end > size:
        return None, offset, None, None  # still being written: read it next time
    data, footer = handle.read(length), handle.read(4)
    if len(footer) < 4:
        return None, offset, _DAMAGED_DATA, None
    expected = struct.unpack("<I", footer)[0]
    if length > CRC_AT_ONCE:
        return data, end, None, expected
    if masked_crc32c(data) != expected:
        return None, offset, _DAMAGED_DATA, None
    return data, end, None, None


_DAMAGED_DATA = "damaged TensorBoard record (its data's CRC does not match)"


def _add_event(steps: dict[int, dict[str, Any]], record: bytes, event_pb2: Any,
               problems: list[ParseProblem], path: str, start: int,
               unchecked: int | None = None) -> None:
    try:
        event = event_pb2.Event.FromString(record)
    except Exception:
        problems.append(ParseProblem(path, start, "unreadable TensorBoard event"))
        return
    if not event.HasField("summary"):
        return
    if not -MAX_INT <= event.step <= MAX_INT:
        problems.append(ParseProblem(path, start, "TensorBoard step out of range"))
        return
    found = {}
    for value in event.summary.value:
        number = _scalar(value)
        if number is not None or value.HasField("simple_value"):
            found[storable(value.tag[:MAX_KEY])] = number
    if found and unchecked is not None:  # a large record that holds a scalar: checked now
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

        if masked_crc32c(record) != unchecked:
            problems.append(ParseProblem(path, start, _DAMAGED_DATA))
            return
    item = steps.setdefault(event.step, {"at": None, "metrics": {}, "offset": start})
    item["at"] = epoch_time(event.wall_time)
    item["metrics"].update(found)


def _scalar(value: Any) -> float | None:
    if value.HasField("simple_value"):
        return _number(value.simple_value)
    if value.HasField("tensor") and not value.tensor.tensor_shape.dim:
        tensor = value.tensor
        for values in (tensor.float_val, tensor.double_val, tensor.int_val, tensor.int64_val):
            if len(values) == 1:
                return _number(values[0])
        if tensor.tensor_content:
            from tensorboard.util import tensor_util

            try:
                return _number(tensor_util.make_ndarray(tensor).item())
            except Exception:
                return None
    return None


# --- params.json, error.txt, experiment state ---------------------------------------------
def read_params(path: Path, root: Root | None = None
                ) -> tuple[dict | None, ParseProblem | None]:
    """A trial's config. Parsed whole, it takes some 45 times its size in memory (a 20
    MiB params.json cost the agent ~943 MiB): one larger than PARAMS_MAX_BYTES is refused
    as its trial's problem before it is read."""
    try:
        raw = read_file(path, root, min(_caps(root).json_bytes, PARAMS_MAX_BYTES))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, ParseProblem(str(path), 0, problem_text(exc))
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except RecursionError:  # nested past what the parser takes
        return None, ParseProblem(str(path), 0, _TOO_DEEP)
    except ValueError as exc:
        return None, ParseProblem(str(path), 0, f"params.json unreadable: {str(exc)[:160]}")
    if not isinstance(data, dict):
        return None, ParseProblem(str(path), 0, "params.json is not a JSON object")
    if nested_deeper(data, MAX_NESTING):
        return None, ParseProblem(str(path), 0, _TOO_DEEP)
    return json_safe(data), None


_TOO_DEEP = f"params.json is nested deeper than {MAX_NESTING} levels: not read"
PARAMS_MAX_BYTES = 1 << 20  # a search's config: kilobytes (Tune's own are)


def nested_deeper(value: Any, levels: int) -> bool:
    """Whether `value` nests objects or arrays more than `levels` deep; not recursive."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > levels:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict)
                                                  else item))
    return False


def read_error(path: Path, max_lines: int = 20, root: Root | None = None
               ) -> tuple[str | None, ParseProblem | None]:
    """error.txt's first lines, or the problem that kept it from being read."""
    try:
        head = read_file(path, root, _caps(root).log_bytes, ERROR_HEAD_BYTES)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, ParseProblem(str(path), 0, problem_text(exc))
    lines = head.decode("utf-8", "replace").splitlines()[:max_lines]
    return storable("\n".join(lines)) or None, None


def newest_state_file(exp_dir: Path) -> Path | None:
    try:
        return max(exp_dir.glob("experiment_state-*.json"), key=lambda p: p.name)
    except (ValueError, OSError):
        return None


def read_experiment_state(exp_dir: Path, root: Root | None = None
                          ) -> dict[str, TuneTrialState]:
    newest = newest_state_file(exp_dir)
    return _read_state(newest, root)[0] if newest else {}


def _read_state(path: Path, root: Root | None
                ) -> tuple[dict[str, TuneTrialState], str | None]:
    """Each trial's state, and the search's metric (runner_data._metric)."""
    try:
        data = json.loads(read_file(path, root, _caps(root).json_bytes))
    except (ValueError, OSError, RecursionError):
        return {}, None
    pairs = data.get("trial_data") if isinstance(data, dict) else None
    states: dict[str, TuneTrialState] = {}
    for pair in pairs if isinstance(pairs, list) else []:
        try:
            trial, meta = json.loads(pair[0]), json.loads(pair[1])
            status = storable(str(trial.get("status") or ""))[:16]
            states[storable(str(trial["trial_id"]))] = TuneTrialState(
                status=_STATUSES.get(status, status),  # Tune's: one copy each, not a trial's
                num_failures=meta.get("num_failures"),
                last_result_time=meta.get("last_result_time"),
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
            continue
    return states, runner_metric(data)


_STATUSES = {s: s for s in ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR")}


class TuneStates:
    """Tune's experiment state per experiment dir, read again only when its newest
    experiment_state-*.json changed: Tune rewrites it whole at every snapshot, and it can
    be megabytes for 1,000 trials. Also the search's objective (collectors.tunesearch),
    tuner.pkl read again only when it changed. The one reader for raywatch's own
    collector and the node agent's. `root`: the log root the experiment dir is under."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._cache: dict[str, tuple[Any, Any]] = {}  # dir -> (state file stat, state)
        self._tuners: dict[str, tuple[Any, Any]] = {}  # dir -> (tuner.pkl stat, objective)
        self._asked: dict[str, float] = {}  # dir -> when last asked about (clock)
        self.clock = clock

    def get(self, exp_dir: Path, root: Root | None = None) -> dict[str, TuneTrialState]:
        return self._state(exp_dir, root)[0]

    def forget_idle(self, idle_s: float) -> None:
        """Drop the experiments not asked about for `idle_s`: one whose trials all settled
        is read again only if they wake up. A finished search's state held for the
        process's life cost ~160 bytes a trial (docs/benchmarks/history_scale_bench.md)."""
        cutoff = self.clock() - idle_s
        for key in [k for k, asked in self._asked.items() if asked < cutoff]:
            del self._asked[key]
            self._cache.pop(key, None)
            self._tuners.pop(key, None)

    def objective(self, exp_dir: Path, root: Root | None = None) -> SearchObjective | None:
        """The search's metric and mode, as far as its files say."""
        return combine(self._tuner(exp_dir, root), self._state(exp_dir, root)[1])

    def _state(self, exp_dir: Path, root: Root | None
               ) -> tuple[dict[str, TuneTrialState], str | None]:
        newest = newest_state_file(exp_dir)
        try:
            stat = os.stat(newest, follow_symlinks=False) if newest else None
        except OSError:
            stat = None
        if newest is None or stat is None:
            return {}, None
        self._asked[str(exp_dir)] = self.clock()
        return _cached(self._cache, exp_dir, (newest.name, stat.st_size, stat.st_mtime_ns),
                       lambda: _read_state(newest, root), ({}, None))

    def _tuner(self, exp_dir: Path, root: Root | None) -> SearchObjective | None:
        try:
            stat = os.stat(exp_dir / TUNER_FILE, follow_symlinks=False)
        except OSError:
            return None
        self._asked[str(exp_dir)] = self.clock()
        return _cached(self._tuners, exp_dir, (stat.st_size, stat.st_mtime_ns),
                       lambda: read_tuner(exp_dir, root), None)

    def changed_at(self, exp_dir: Path) -> float | None:
        """When the newest state file was last written (epoch seconds), or None."""
        newest = newest_state_file(exp_dir)
        try:
            return os.stat(newest, follow_symlinks=False).st_mtime if newest else None
        except OSError:
            return None


def _cached(cache: dict[str, tuple[Any, Any]], exp_dir: Path, key: Any,
            read: Callable[[], Any], unknown: Any) -> Any:
    """read(), again only when `key` (a file's stat) changed. What the experiment's files
    hold is theirs to get wrong: a failure no check foresaw leaves the experiment's state
    `unknown` until the file changes, and every other experiment is read."""
    kept = cache.get(str(exp_dir))
    if kept and kept[0] == key:
        return kept[1]
    try:
        value = read()
    except Exception as exc:
        log.warning("%s: Tune's files not read: %s: %s", exp_dir, type(exc).__name__, exc)
        value = unknown
    cache[str(exp_dir)] = (key, value)
    return value
