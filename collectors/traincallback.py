"""raywatch's Ray Train callback: one JSON line per report, where raywatch's readers look.

Ray Train V2 (Ray 2.60) keeps nothing on disk per `ray.train.report` and has no logger
of its own (docs/ray-facts.md, "Ray Train V2 runs"): a run's metrics reach only the
loggers its author wrote. One line in the run's config makes them raywatch's too:

    RunConfig(callbacks=[RaywatchCallback()])

Each report then appends a line to `<log dir>/<run name>/raywatch-train.jsonl`; the log
dir is the argument, else RAYWATCH_TRAIN_LOG_DIR in the driver's environment, else
~/ray_results/raywatch-train, which lies under a log root raywatch and its node agents
read by default. A line (docs/trial-logs.md):

    {"step": 3, "time": 1767000000.5, "run": "my-run", "run_id": "9f1c…", "attempt": 1,
     "world_size": 2, "rank": 0, "metrics": {"loss": 0.12}}

`metrics` are rank 0's, as Ray's own `Result.metrics` are. `step` counts the reports of
one attempt: after Ray Train says the worker group failed (`after_exception`), the next
report is step 1 of the next attempt, and the first line a controller writes truncates
the file (Ray Train resumes a run of the same name from its checkpoint), so raywatch's
reader takes either as a new attempt, as it does for verl's and EasyR1's loggers.

Ray calls it in the run's controller (a TrainController actor on the driver's node), not
in the workers. Nothing here may break a training run: a line that cannot be written is
logged (once per reason) and the run carries on.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ray.train.v2.api.callback import UserCallback

from collectors.runformats import TRAIN_FILE, train_run_dir

DEFAULT_LOG_DIR = "~/ray_results/raywatch-train"  # under ~/ray_results: a default log root

logger = logging.getLogger(__name__)


class RaywatchCallback(UserCallback):
    """Appends a JSON line per report of the run to its log under `log_dir`. The log dir
    is read here, in the run's driver, whose environment the user set (Ray Train hands
    its controller only its own variables); "~" is expanded where the file is written."""

    def __init__(self, log_dir: str | os.PathLike[str] | None = None) -> None:
        self.log_dir = str(log_dir or os.environ.get("RAYWATCH_TRAIN_LOG_DIR") or DEFAULT_LOG_DIR)
        self.attempt = 1
        self.step = 0
        self.truncate = True  # the controller's first line starts the file afresh
        self.failed = False
        self.said: set[str] = set()

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]],
                     checkpoint: Any) -> None:
        """Ray Train's hook after every worker reported: one line, never an error."""
        try:
            self._append(run_context, metrics)
        except Exception as exc:  # the run must go on, whatever happens here
            self._say(f"raywatch could not write the run's report line: {exc!r}")

    def after_exception(self, run_context: Any, worker_exceptions: dict[int, Exception]
                        ) -> None:
        """The worker group failed: the next report, if Ray Train retries, starts the
        next attempt."""
        self.failed = True

    def log_path(self, run_name: str) -> Path:
        return Path(self.log_dir).expanduser() / train_run_dir(run_name) / TRAIN_FILE

    def _append(self, run_context: Any, metrics: list[dict[str, Any]]) -> None:
        if self.failed:
            self.attempt, self.step, self.failed = self.attempt + 1, 0, False
        self.step += 1
        name = run_context.get_run_config().name
        line = {"step": self.step, "time": time.time(), "run": name,
                "run_id": getattr(run_context, "run_id", None), "attempt": self.attempt,
                "world_size": len(metrics), "rank": 0,
                "metrics": metrics[0] if metrics else {}}
        text = json.dumps(line, default=_plain, skipkeys=True) + "\n"
        path = self.log_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, text.encode(), self.truncate)
        self.truncate = False

    def _say(self, message: str) -> None:
        """Log a failure once: a full disk would otherwise log at every report."""
        if message not in self.said:
            self.said.add(message)
            logger.warning(message)


def _write(path: Path, data: bytes, truncate: bool) -> None:
    """One write of a whole line (appends of a few KB land whole), never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if truncate else os.O_APPEND)
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _plain(value: Any) -> Any:
    """A metric JSON cannot write as is: a NumPy (or other) scalar as its number, anything
    else as its text (raywatch's reader keeps only the numbers)."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    return str(value)
