"""Reading a trial's result files, whatever wrote them: the one way the one reader (the
node agent's collector, which dashboard.trials.ingest runs for raywatch's own host)
tails a file, by its kind.

Runs of verl's and EasyR1's file loggers and of raywatch's Ray Train callback
(collectors.runformats says which file is one) are read here: a line is a step, its
metrics flattened with "/" (EasyR1 nests them, verl keeps them flat under "data", the
Train callback under "metrics": `timing_s/gen` either way), the step's whole time
(`timing_s/step`) its time_this_iter_s. Each truncates its file when the trainer starts
again, resumes included: the lines after that are a new attempt of the run, and what was
stored of the earlier one stays. The Train callback also starts its steps at 1 again
after a failed worker group: a step lower than the one before is a new attempt too.
"""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from collectors.records import EASYR1, RESULT_JSON, TB_EVENTS, VERL
from collectors.rootfiles import Root
from collectors.runformats import step_seconds
from collectors.tunelogs import (
    MAX_LINE_BYTES,
    FileCursor,
    TailResult,
    flatten_metrics,
    object_with_count,
    tail_lines,
    tail_result_json,
    tail_tb_events,
)

_STEP_ONLY = frozenset({"step"})


def tail_log(kind: str, path: Path, cursor: FileCursor | None, trial_id: str, *,
             run_format: str = "", root: Root | None = None,
             max_bytes: int = MAX_LINE_BYTES, max_line: int | None = None) -> TailResult:
    """Read on from `cursor` in a file of `kind` (records.RESULT_JSON, TB_EVENTS,
    RUN_JSONL): about `max_bytes`, a line up to `max_line` (TrialDir.logs names them)."""
    if kind == RESULT_JSON:
        return tail_result_json(path, cursor, trial_id, max_bytes, max_line, root=root)
    if kind == TB_EVENTS:
        return tail_tb_events(path, cursor, trial_id, max_bytes, root=root)
    return tail_run_jsonl(path, cursor, trial_id, run_format, max_bytes, max_line, root)


def tail_run_jsonl(path: Path, cursor: FileCursor | None, trial_id: str, run_format: str,
                   max_bytes: int = MAX_LINE_BYTES, max_line: int | None = None,
                   root: Root | None = None) -> TailResult:
    """The steps a verl or EasyR1 file logger (or the Train callback) added since
    `cursor`. verl's and EasyR1's lines carry no time: the last one read up to the file's
    end is stamped with the file's mtime (when it was written), so a run read long after
    it ended does not look fresh."""
    parse = partial(parse_run_line, trial_id=trial_id, run_format=run_format)
    result = tail_lines(path, cursor, parse, max_bytes, max_line, root, restarts=True)
    if not result.results or result.results[-1].at is not None:
        return result
    try:
        stat = os.stat(path, follow_symlinks=False)
    except OSError:
        return result
    if result.cursor.offset < stat.st_size:
        return result
    last = replace(result.results[-1], at=datetime.fromtimestamp(stat.st_mtime, UTC))
    return replace(result, results=[*result.results[:-1], last])


def parse_run_line(raw: bytes, trial_id: str, run_format: str) -> dict[str, Any] | str:
    """One line of a verl (`{"step": N, "data": {...}}`) or EasyR1 (`{"step": N,
    "timing_s": {...}, ...}`) file logger, or of the Train callback (`{"step": N, "time":
    T, ..., "metrics": {...}}`) -> a step's fields, or why it cannot be used."""
    read = object_with_count(raw, "step")
    if isinstance(read, str):
        return read
    obj, step = read
    at = None
    if run_format == VERL:
        data = obj.get("data")
        if not isinstance(data, dict):
            return "line has no \"data\" object (verl's file logger writes one)"
        metrics = flatten_metrics(data, skip=())
    elif run_format == EASYR1:
        metrics = flatten_metrics(obj, skip=_STEP_ONLY)
    else:
        return f"no reader for runs of {run_format!r}"
    return {"trial_id": trial_id, "iteration": step, "at": at,
            "time_this_iter_s": step_seconds(metrics), "pid": None, "node_ip": None,
            "hostname": None, "metrics": metrics}
