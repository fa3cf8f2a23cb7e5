"""The `trial_log` record (docs/agent-protocol.md), both ways: what the agent read of one
trial directory, and the server's strict reading of it back into a TrialUpdate. Pure;
no Django. Limits are the file readers' (collectors.tunelogs), so a record says no
more than the files say; raywatch's own host decodes its records here too."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from collectors.agent.wire import TRIAL_LOG, WireError, decode_time, timestamp
from collectors.records import FRAMEWORKS, ResultLine, TrialUpdate
from collectors.runformats import PROCESS_LOG_FRAMEWORKS
from collectors.tunelogs import MAX_KEY, MAX_METRICS, json_safe
from collectors.tunesearch import MAX_NAME as MAX_SEARCH_METRIC
from collectors.tunesearch import MODES

TUNE, TENSORBOARD, CONSOLE = "tune", "tensorboard", "console"  # how its steps were read
MAX_NAME = 1024  # experiment, trial id, trainable: stored cut to 255
MAX_PATH = 4096
MAX_TEXT = 64 << 10  # error.txt's first lines, a parse problem
MAX_PROBLEMS = 10  # problems listed in one record; problem_count says how many there were
MAX_INT = 2**31 - 1  # iteration, attempt and pid are 32-bit columns


# --- sending -----------------------------------------------------------------------------
def encode_trial_log(update: TrialUpdate, at: datetime,
                     problems: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One record; `problems` ({file, byte_offset, message}) are the last few of
    update.problem_count."""
    return {
        "kind": TRIAL_LOG, "at": timestamp(at),
        "experiment": update.experiment, "experiment_dir": update.experiment_dir,
        "format": TENSORBOARD if update.tensorboard else CONSOLE if update.console else TUNE,
        "framework": update.framework or None,
        "trial_id": update.trial_id, "trainable": update.trainable,
        "directory": update.directory, "live": update.live,
        "results": [encode_result(r) for r in update.results],
        "problem_count": update.problem_count, "problems": (problems or [])[-MAX_PROBLEMS:],
        "params": update.params,
        "error": ({"text": update.error_text, "at": _time_or_none(update.error_at)}
                  if update.error_text else None),
        "tune_status": update.tune_status,
        "search": ({"metric": update.search_metric, "mode": update.search_mode}
                   if update.search_metric or update.search_mode else None),
        "writer_pid": update.writer_pid,
        **({"rank": {"rank": update.rank, "world_size": update.world_size,
                     "step": update.rank_step, "step_at": _time_or_none(update.rank_step_at)}}
           if update.rank is not None else {}),
    }


def encode_result(line: ResultLine) -> dict[str, Any]:
    return {"attempt": line.attempt, "iteration": line.iteration,
            "at": _time_or_none(line.at), "time_this_iter_s": line.time_this_iter_s,
            "metrics": line.metrics, "pid": line.pid, "node_ip": line.node_ip,
            "hostname": line.hostname}


def _time_or_none(at: datetime | None) -> str | None:
    return timestamp(at) if at is not None else None


# --- reading -----------------------------------------------------------------------------
def decode_trial_log(record: dict[str, Any], node: str | None) -> TrialUpdate:
    """A trial_log record of `node` (the token's). Directories are named "node:path":
    the same path on two nodes is two places. `node` None: raywatch's own host read it
    (dashboard.trials.ingest), and its directories are the paths as they are."""
    where = "trial_log"
    decode_time(record.get("at"), f"{where}.at")
    kind = record.get("format")
    if kind not in (TUNE, TENSORBOARD, CONSOLE):
        raise WireError(f"{where}.format: {TUNE!r}, {TENSORBOARD!r} or {CONSOLE!r}")
    # An agent from before frameworks were named says only the format.
    framework = record.get("framework") or kind
    if framework not in FRAMEWORKS or (kind == CONSOLE
                                       and framework not in PROCESS_LOG_FRAMEWORKS):
        raise WireError(f"{where}.framework: one of {', '.join(FRAMEWORKS)}"
                        f" ({', '.join(PROCESS_LOG_FRAMEWORKS)} for a console)")
    results = _field(record, "results", list, where, required=True)
    problems = _field(record, "problems", list, where) or []
    count = _int(record.get("problem_count", 0), f"{where}.problem_count", 0)
    if len(problems) > MAX_PROBLEMS or count < len(problems):
        raise WireError(f"{where}.problems: at most {MAX_PROBLEMS}, and no more than "
                        "problem_count")
    last = [_problem(p, f"{where}.problems[{i}]") for i, p in enumerate(problems)]
    params = _field(record, "params", dict, where)
    error = _field(record, "error", dict, where)
    status = _text(record.get("tune_status"), f"{where}.tune_status", 16, optional=True)
    metric, mode = _search(_field(record, "search", dict, where), f"{where}.search")
    rank = _rank(_field(record, "rank", dict, where), f"{where}.rank")
    return TrialUpdate(
        experiment=_text(record.get("experiment"), f"{where}.experiment", MAX_NAME,
                         empty=True),
        experiment_dir=_place(node, record.get("experiment_dir"), f"{where}.experiment_dir"),
        trial_id=_text(record.get("trial_id"), f"{where}.trial_id", MAX_NAME),
        trainable=_text(record.get("trainable", ""), f"{where}.trainable", MAX_NAME,
                        empty=True),
        directory=_place(node, record.get("directory"), f"{where}.directory"),
        tensorboard=kind == TENSORBOARD, console=kind == CONSOLE,
        live=_field(record, "live", bool, where) or False,
        results=tuple(_result(r, f"{where}.results[{i}]") for i, r in enumerate(results)),
        problem_count=count, last_problem=last[-1] if last else None,
        params=json_safe(params) if params is not None else None,
        error_text=_text(error.get("text"), f"{where}.error.text", MAX_TEXT) if error else None,
        error_at=(decode_time(error["at"], f"{where}.error.at")
                  if error and error.get("at") is not None else None),
        tune_status=status or None,
        search_metric=metric, search_mode=mode, framework=framework,
        writer_pid=(_int(record["writer_pid"], f"{where}.writer_pid", 1)
                    if record.get("writer_pid") is not None else None),
        **rank,
    )


def refused_trial_log(record: Any, node: str | None, reason: str) -> TrialUpdate | None:
    """A trial_log record the server cannot read (a value out of range, a framework it
    does not know yet) as that trial's visible problem, so that it costs only itself:
    None when it does not even say which trial it is."""
    if not isinstance(record, dict):
        return None
    try:
        experiment = _text(record.get("experiment"), "", MAX_NAME, empty=True)
        trial_id = _text(record.get("trial_id"), "", MAX_NAME)
        place = _place(node, record.get("experiment_dir"), "")
    except WireError:
        return None
    return TrialUpdate(experiment=experiment, experiment_dir=place, trial_id=trial_id,
                       trainable="", directory=place, tensorboard=False, problem_count=1,
                       last_problem=f"a record of it was refused: {reason}"[:2000])


def _rank(data: dict[str, Any] | None, where: str) -> dict[str, Any]:
    """A Ray Train rank's facts (TrialUpdate.rank ...), or none."""
    if data is None:
        return {}

    def number(name: str, low: int) -> int | None:
        value = data.get(name)
        return _int(value, f"{where}.{name}", low) if value is not None else None
    at = data.get("step_at")
    return {"rank": _int(data.get("rank"), f"{where}.rank", 0),
            "world_size": number("world_size", 1), "rank_step": number("step", 0),
            "rank_step_at": decode_time(at, f"{where}.step_at") if at is not None else None}


def _search(data: dict[str, Any] | None, where: str) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    metric = _text(data.get("metric"), f"{where}.metric", MAX_SEARCH_METRIC, optional=True)
    mode = data.get("mode")
    if mode not in (None, *MODES):
        raise WireError(f"{where}.mode: {MODES[0]!r}, {MODES[1]!r} or null")
    return metric, mode


def _place(node: str | None, path: Any, where: str) -> str:
    text = _text(path, where, MAX_PATH)
    return text if node is None else f"{node}:{text}"


def place_node(place: str) -> str | None:
    """The agent's node a directory was read on ("node:/path", as _place names it), or
    None for raywatch's own host (a plain path)."""
    if ":" not in place or place.startswith("/"):
        return None
    return place.split(":", 1)[0]


def _result(data: Any, where: str) -> ResultLine:
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected an object")
    metrics = data.get("metrics")
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS:
        raise WireError(f"{where}.metrics: an object of at most {MAX_METRICS} numbers")
    at = data.get("at")
    pid = data.get("pid")
    return ResultLine(
        trial_id="", attempt=_int(data.get("attempt"), f"{where}.attempt", 1),
        iteration=_int(data.get("iteration"), f"{where}.iteration", -MAX_INT),
        at=decode_time(at, f"{where}.at") if at is not None else None,
        time_this_iter_s=_number(data.get("time_this_iter_s"), f"{where}.time_this_iter_s"),
        pid=_int(pid, f"{where}.pid", 0) if pid is not None else None,
        node_ip=_text(data.get("node_ip"), f"{where}.node_ip", 255, optional=True),
        hostname=_text(data.get("hostname"), f"{where}.hostname", 255, optional=True),
        metrics={_text(k, f"{where}.metrics key", MAX_KEY, empty=True):
                 _number(v, f"{where}.metrics[{k[:40]!r}]") for k, v in metrics.items()},
        byte_offset=0,
    )


def _problem(data: Any, where: str) -> str:
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected an object")
    name = _text(data.get("file"), f"{where}.file", MAX_PATH)
    offset = _int(data.get("byte_offset"), f"{where}.byte_offset", 0, 2**62)
    message = _text(data.get("message"), f"{where}.message", MAX_TEXT)
    return f"{name} @ byte {offset}: {message}"


def _field(data: dict[str, Any], key: str, kind: type, where: str,
           required: bool = False) -> Any:
    value = data.get(key)
    if (value is None and required) or (value is not None and not isinstance(value, kind)):
        raise WireError(f"{where}.{key}: expected {kind.__name__}")
    return value


def _text(value: Any, where: str, limit: int, optional: bool = False,
          empty: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit or (not value and not empty):
        raise WireError(f"{where}: expected {'a' if empty else 'a non-empty'} string of at "
                        f"most {limit} characters")
    return value.replace("\x00", "")  # Postgres text refuses NUL


def _int(value: Any, where: str, minimum: int, maximum: int = MAX_INT) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise WireError(f"{where}: expected an integer from {minimum} to {maximum}")
    return value


def _number(value: Any, where: str) -> float | None:
    """A number, or None; NaN and infinities (Python's JSON reads them) become None."""
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise WireError(f"{where}: expected a number or null")
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
