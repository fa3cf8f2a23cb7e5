"""A Tune search's objective (metric and mode), as the search itself wrote it down.

Tune keeps them in two places in the experiment directory (Ray 2.60, docs/ray-facts.md):

- `experiment_state-*.json` (JSON, also in the driver's live copy): `runner_data._metric`,
  the metric of `TuneConfig(metric=...)`; no mode.
- `tuner.pkl` (storage copy only, written when the Tuner starts): a pickle of the Tuner's
  settings, holding `TuneConfig.metric`/`.mode` and, when those are unset, the scheduler's
  or searcher's own `_metric`/`_mode` (`ASHAScheduler(metric=..., mode=...)`).

A pickle is never loaded here: loading runs code, and these files are the user's. Its
opcodes are walked (pickletools.genops executes nothing) and only the plain strings that
follow those keys are taken. Pure apart from reading the two files (through
collectors.rootfiles, held to their log root); no Django.
"""

from __future__ import annotations

import io
import pickletools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.rootfiles import DEFAULT_CAPS, Root, read_file, storable

TUNER_FILE = "tuner.pkl"
MAX_PICKLE_BYTES = 4 << 20  # tuner.pkl is a few KB; a bigger one is read this far
MAX_NAME = 200
MODES = ("min", "max")
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
               "SHORT_BINSTRING", "BINSTRING", "STRING"}
_MEMO_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}
_MEMO_GET = {"GET", "BINGET", "LONG_BINGET"}
_KEYS = {"metric", "mode", "_metric", "_mode"}


@dataclass(frozen=True)
class SearchObjective:
    """What the search optimises; either may be unknown (None)."""

    metric: str | None
    mode: str | None  # "min" or "max"

    def key(self) -> str:
        return f"{self.metric or ''}/{self.mode or ''}"


def combine(pickled: SearchObjective | None, runner: str | None) -> SearchObjective | None:
    """tuner.pkl's word, the experiment state's metric where tuner.pkl names none."""
    metric = (pickled.metric if pickled else None) or runner
    mode = pickled.mode if pickled else None
    return SearchObjective(metric, mode) if metric or mode else None


def read_tuner(exp_dir: Path, root: Root | None = None) -> SearchObjective | None:
    return pickled_objective(_head(exp_dir / TUNER_FILE, root))


def runner_metric(state: Any) -> str | None:
    """`runner_data._metric` of a parsed experiment_state-*.json."""
    runner = state.get("runner_data") if isinstance(state, dict) else None
    return _name(runner.get("_metric")) if isinstance(runner, dict) else None


def pickled_objective(data: bytes | None) -> SearchObjective | None:
    """TuneConfig's metric/mode, each falling back to the first scheduler's or
    searcher's `_metric`/`_mode` that is set."""
    pairs = _string_items(data) if data else []
    public = dict(_first_each(pairs, ("metric", "mode")))
    private = dict(_first_each([(k, v) for k, v in pairs if v is not None],
                               ("_metric", "_mode")))
    metric = _name(public.get("metric")) or _name(private.get("_metric"))
    mode = _mode(public.get("mode")) or _mode(private.get("_mode"))
    return SearchObjective(metric, mode) if metric or mode else None


def _first_each(pairs: list[tuple[str, str | None]], keys: tuple[str, ...]
                ) -> list[tuple[str, str | None]]:
    found: dict[str, str | None] = {}
    for key, value in pairs:
        if key in keys and key not in found:
            found[key] = value
    return list(found.items())


def _string_items(data: bytes) -> list[tuple[str, str | None]]:
    """(key, value) for each of _KEYS seen as a dict key, in order: the value when the
    next object pushed is a string (memo references followed), else None."""
    memo: dict[int, Any] = {}
    last: Any = None
    pending: str | None = None
    items: list[tuple[str, str | None]] = []
    try:
        for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
            name = opcode.name
            if name in _MEMO_PUT or name == "MEMOIZE":
                memo[arg if name in _MEMO_PUT else len(memo)] = last
                continue
            if name in ("FRAME", "PROTO", "MARK", "STOP"):
                continue
            value = memo.get(arg) if name in _MEMO_GET else (
                arg if name in _STRING_OPS else None)
            last = value
            if pending is not None:
                items.append((pending, value if isinstance(value, str) else None))
                pending = None
            elif isinstance(value, str) and value in _KEYS:
                pending = value
    except (ValueError, EOFError, KeyError, TypeError, UnicodeDecodeError):
        pass  # a cut or odd pickle: what was read so far
    return items


def _head(path: Path, root: Root | None) -> bytes | None:
    try:  # a tuner.pkl that cannot be read (a link, a FIFO) says nothing
        return read_file(path, root, (root.caps if root else DEFAULT_CAPS).log_bytes,
                         MAX_PICKLE_BYTES)
    except OSError:
        return None


def _name(value: Any) -> str | None:
    if not isinstance(value, str) or not value or value == "_metric":
        return None
    return storable(value)[:MAX_NAME]  # a pickle's text may hold lone surrogates


def _mode(value: Any) -> str | None:
    return value if value in MODES else None
