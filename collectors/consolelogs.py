"""Training steps as RL post-training frameworks print them to their trainer actor's console.

Started with their defaults, verl, EasyR1 and OpenRLHF log each step only to the stdout
of one Ray actor (verl's TaskRunner, EasyR1's Runner, OpenRLHF's PPOTrainer), and Ray
writes that stdout unchanged to the actor's worker-<id>-<job>-<pid>.out. The node agent
tails that file; `read_console` turns what it read into steps. Pure: no I/O, no Django.

The shapes, from each framework's own source:

- verl `LocalLogger.log` (verl/utils/logger/aggregate_logger.py, `concat_dict_to_str`):
  one line `step:N - key:value - key:value`; values `f"{v:.3f}"` up to v0.4.x,
  `pprint.pformat(v)` since v0.5.0 (a repr: `0.25`, `nan`, `np.float64(0.25)` under
  numpy 2); values that are not `numbers.Number` are left out.
- EasyR1 `ConsoleLogger.log` (verl/utils/logger/logger.py):
  `print(f"Step {step}\\n" + yaml.dump(unflatten_dict(data), indent=2))`: a header line,
  block YAML nested by "/" (keys sorted), then the blank line of print's own newline.
  Its numpy scalars (every `reduce_metrics` value) are dumped by PyYAML's full dumper as
  `!!python/object/apply:numpy...multiarray.scalar` objects with the raw bytes base64'd.
- OpenRLHF `PPOTrainer.fit` (openrlhf/trainer/ppo_trainer.py, v0.8.1+): its logger writes
  `INFO 08-13 19:25:45 ppo_trainer.py:547] ✨ Global step N: {'key': value, ...}` to
  stdout (a Python dict repr); evaluation, when configured, logs
  `✨ Evaluation completed in 0:01:02, global_step N, eval_metrics: {...}`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import string
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from collectors.records import EASYR1, OPENRLHF, VERL

MAX_METRICS = 400
MAX_RECORD_BYTES = 1 << 20
MAX_KEY_CHARS = 255
# The longest text a real number prints as: `f"{1e308:.3f}"` is 313 characters.
_MAX_NUMBER_CHARS = 512
# A step number past this is no step a trainer counted to.
_MAX_STEP_DIGITS = 18

# Keys that only a validation pass writes: verl's _validate ("val-core/", "val-aux/";
# "val/" before v0.3), EasyR1's _validate ("val/..._reward", "val_response_length/..."),
# OpenRLHF's compute_eval_metrics ("eval_...").
_VALIDATION_PREFIXES = {
    VERL: ("val-core/", "val-aux/", "val/"),
    EASYR1: ("val/", "val_"),
    OPENRLHF: ("eval_",),
}


@dataclass(frozen=True)
class ConsoleStep:
    step: int
    metrics: dict[str, float | None]
    validation: bool


class _Skip:
    """A printed value that is no number at all (a string, a list): the key is dropped."""


_SKIP = _Skip()
Number = float | None | _Skip
_Printed = TypeVar("_Printed")


def read_console(
    framework: str, data: bytes, at_end: bool = False
) -> tuple[list[ConsoleStep], int]:
    """The complete step records in `data` (bytes read from a worker log from some cursor),
    and how many bytes of `data` were consumed: up to the end of the last complete record,
    so a record still being written is read again next time. Every other line is skipped
    and consumed. `at_end`: the file will not grow, so an unfinished record is dropped."""
    try:
        if framework == EASYR1:
            return _read_easyr1(data, at_end)
        parse = _LINE_PARSERS.get(framework)
        if parse is None:
            return [], len(data)  # nothing in it can be a record of an unknown framework
        return _read_lines(data, at_end, parse, _VALIDATION_PREFIXES[framework])
    except Exception:  # a bug here must not stop the agent's tailing: skip what was read
        return [], len(data)


# -- lines --------------------------------------------------------------------------------


def _lines(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each complete line, the end just past its newline."""
    start = 0
    while (nl := data.find(b"\n", start)) >= 0:
        yield start, nl + 1
        start = nl + 1


def _tail_consumed(data: bytes, consumed: int, at_end: bool) -> int:
    """How far to consume when `data` ends in a partial line: keep it for the next read,
    unless the process is gone or the line is already too long to be a record."""
    if at_end or len(data) - consumed > MAX_RECORD_BYTES:
        return len(data)
    return consumed


def _text(raw: bytes) -> str:
    """One line as text: invalid UTF-8 replaced, the newline gone, and only what follows
    the last carriage return, as a terminal would show it."""
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    return text[text.rfind("\r") + 1 :]


LineParser = Callable[[str], tuple[int, list[tuple[str, str]]] | None]


def _read_lines(
    data: bytes, at_end: bool, parse: LineParser, prefixes: tuple[str, ...]
) -> tuple[list[ConsoleStep], int]:
    """verl and OpenRLHF: each step is one line."""
    steps: list[ConsoleStep] = []
    consumed = 0
    for start, end in _lines(data):
        consumed = end
        if end - start > MAX_RECORD_BYTES:
            continue
        found = parse(_text(data[start:end]))
        if found is not None:
            steps.append(_step(found[0], _metrics(found[1], _number_from_repr), prefixes))
    return steps, _tail_consumed(data, consumed, at_end)


def _step(step: int, metrics: dict[str, float | None], prefixes: tuple[str, ...]) -> ConsoleStep:
    validation = bool(metrics) and all(key.startswith(prefixes) for key in metrics)
    return ConsoleStep(step=step, metrics=metrics, validation=validation)


def _metrics(
    pairs: Iterable[tuple[str, _Printed]], number: Callable[[_Printed], Number]
) -> dict[str, float | None]:
    """The first MAX_METRICS usable (key, printed value) pairs, in line order."""
    metrics: dict[str, float | None] = {}
    for key, printed in pairs:
        if len(metrics) >= MAX_METRICS:
            break
        if not _usable_key(key) or key in metrics:
            continue
        value = number(printed)
        if not isinstance(value, _Skip):
            metrics[key] = value
    return metrics


def _usable_key(key: str) -> bool:
    # Control characters (NUL above all) have no place in a metric name or a database, and
    # a lone surrogate (an escape in a quoted key) cannot even be encoded to be sent.
    return 0 < len(key) <= MAX_KEY_CHARS and not any(
        ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in key)


def _step_number(text: str) -> int | None:
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= _MAX_STEP_DIGITS:
        return int(text)
    return None


# -- numbers ------------------------------------------------------------------------------


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _number_from_repr(text: str) -> Number:
    """A number as Python printed it (repr, pprint, `:.3f`): `0.25`, `nan`, `-inf`, `3`,
    `True`, numpy 2's `np.float64(0.25)`, torch's `tensor(0.25, device='cuda:0')`."""
    text = text.strip()
    if len(text) > _MAX_NUMBER_CHARS:
        # Only a huge int prints this long; it is a number, just not a float.
        return None if text.lstrip("+-").isascii() and text.lstrip("+-").isdigit() else _SKIP
    if text in ("True", "False", "np.True_", "np.False_"):
        return 1.0 if "True" in text else 0.0
    try:
        return _finite(float(text))
    except ValueError:
        pass
    if text.startswith("(") and text.endswith("j)"):
        return None  # a complex number: a number, but none a chart can show
    return _wrapped_number(text)


def _wrapped_number(text: str) -> Number:
    """`np.float64(0.25)`, `tensor(0.25, device='cuda:0')`, `Decimal('0.25')`: the first
    argument of a number type's repr."""
    open_at = text.find("(")
    if open_at <= 0 or not text.endswith(")"):
        return _SKIP
    name = text[:open_at]
    if not (name.startswith(("np.", "numpy.")) or name in ("tensor", "Decimal")):
        return _SKIP
    inner = text[open_at + 1 : -1].split(",", 1)[0].strip().strip("'\"")
    if "(" in inner:
        return _SKIP  # nested calls are no number's repr; and no recursion on hostile text
    return _number_from_repr(inner)


# -- verl ---------------------------------------------------------------------------------


def _verl_line(text: str) -> tuple[int, list[tuple[str, str]]] | None:
    """`step:N - key:value - key:value`, as concat_dict_to_str joins it."""
    if not text.startswith("step:"):
        return None
    parts = text.split(" - ")
    step = _step_number(parts[0][len("step:") :])
    if step is None:
        return None
    return step, _verl_pairs(parts[1:])


def _verl_pairs(parts: list[str]) -> list[tuple[str, str]]:
    """Keys may hold ":" (the value never does, so the last one splits) and even " - "
    (a part with no ":" is the front of the next part's key)."""
    pairs: list[tuple[str, str]] = []
    front = ""
    for part in parts:
        key, colon, value = part.rpartition(":")
        if not colon:
            front = f"{front}{part} - " if len(front) <= MAX_KEY_CHARS else front
            continue
        pairs.append((front + key, value))
        front = ""
        if len(pairs) > 4 * MAX_METRICS:
            break  # enough to fill MAX_METRICS even if many are dropped
    return pairs


# -- OpenRLHF -----------------------------------------------------------------------------

_OPENRLHF_STEP = ("✨ Global step ", "Global step ")  # ppo_trainer.py; ppo_trainer_async.py
_OPENRLHF_EVAL = "✨ Evaluation completed in "
# Where its logging prefix ("INFO 08-13 19:25:45 ppo_trainer.py:547] ") may end at most.
_MAX_PREFIX_CHARS = 200


def _openrlhf_line(text: str) -> tuple[int, list[tuple[str, str]]] | None:
    """The message must follow the logger's prefix directly: the same words inside another
    message (the `Sample: [...]` line quotes model output) are no step."""
    end = text.find("] ", 0, _MAX_PREFIX_CHARS)
    if end < 0:
        return None
    message = text[end + 2 :]
    for marker in _OPENRLHF_STEP:
        if message.startswith(marker):
            step_text, sep, rest = message[len(marker) :].partition(": ")
            return _with_dict(_step_number(step_text), rest if sep else "")
    if message.startswith(_OPENRLHF_EVAL):
        _, sep, rest = message.partition(", global_step ")
        step_text, sep2, rest = rest.partition(", eval_metrics: ")
        return _with_dict(_step_number(step_text), rest if sep and sep2 else "")
    return None


def _with_dict(step: int | None, text: str) -> tuple[int, list[tuple[str, str]]] | None:
    if step is None or not text.startswith("{"):
        return None
    pairs = _dict_repr_pairs(text)
    return None if pairs is None else (step, pairs)


def _dict_repr_pairs(text: str) -> list[tuple[str, str]] | None:
    """The (key, value text) pairs of a flat dict's repr, `{'a': 0.5, 'b': [1, 2]}`.
    One forward scan (nesting counted, never recursed into); None when it never closes."""
    pairs: list[tuple[str, str]] = []
    pos = 1
    while pos < len(text):
        while pos < len(text) and text[pos] in ", ":
            pos += 1
        if text.startswith("}", pos):
            return pairs
        key_end = _scan(text, pos, ":")
        value_end = _scan(text, key_end + 1, ",}")
        if value_end >= len(text):
            return None
        key = _string_literal(text[pos:key_end].strip())
        if key is not None and len(pairs) <= 4 * MAX_METRICS:
            pairs.append((key, text[key_end + 1 : value_end]))
        pos = value_end
    return None


def _scan(text: str, pos: int, stops: str) -> int:
    """The index of the first of `stops` outside brackets and quotes, or len(text)."""
    depth = 0
    while pos < len(text):
        char = text[pos]
        if char in "'\"":
            pos = _quote_end(text, pos)
        elif char in "([{":
            depth += 1
        elif char in ")]}" and depth > 0:
            depth -= 1
        elif char in stops and depth == 0:
            return pos
        pos += 1
    return pos


def _quote_end(text: str, pos: int) -> int:
    """The index of the quote closing the string literal opened at `pos`."""
    quote = text[pos]
    pos += 1
    while pos < len(text) and text[pos] != quote:
        pos += 2 if text[pos] == "\\" else 1
    return pos


_PY_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t"}
_PY_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _string_literal(literal: str) -> str | None:
    """A key's repr back to the key; keys that are no short string literal are None.
    Undone by hand: ast.literal_eval warns on a bad escape, and hostile text has them."""
    if (len(literal) < 2 or literal[0] not in "'\"" or literal[-1] != literal[0]
            or len(literal) > 4 * MAX_KEY_CHARS):
        return None
    body = literal[1:-1]
    return _py_unescape(body) if "\\" in body else body


def _py_unescape(body: str) -> str:
    """The escapes that str.__repr__ writes: backslash, quote, n, r, t, x, u and U."""
    out: list[str] = []
    pos = 0
    while (slash := body.find("\\", pos)) >= 0:
        out.append(body[pos:slash])
        letter = body[slash + 1 : slash + 2]
        width = _PY_HEX_ESCAPES.get(letter, 0)
        digits = body[slash + 2 : slash + 2 + width]
        if width and len(digits) == width and all(c in string.hexdigits for c in digits):
            code = int(digits, 16)
            out.append(chr(code) if code <= 0x10FFFF else "\ufffd")
            pos = slash + 2 + width
        else:
            out.append(_PY_ESCAPES.get(letter, "\\" + letter))
            pos = slash + 2
    out.append(body[pos:])
    return "".join(out)


_LINE_PARSERS: dict[str, LineParser] = {VERL: _verl_line, OPENRLHF: _openrlhf_line}


# -- EasyR1 -------------------------------------------------------------------------------


_TOO_LONG = "\x00" * (MAX_KEY_CHARS + 1)  # a key prefix that no usable key has


@dataclass
class _Level:
    """A YAML mapping open at some indent, and the flat key its entries continue."""

    indent: int
    prefix: str


@dataclass
class _Object:
    """A tagged value spanning the lines under its key (numpy scalars)."""

    key: str
    indent: int
    numpy_scalar: bool
    anchor: str | None = None
    lines: list[str] = field(default_factory=list)


@dataclass
class _Yaml:
    """The block YAML that `yaml.dump(nested_dict, indent=2)` writes, line by line: nested
    mappings of scalars. Sequences, multi-line strings and other objects are stepped over.
    Keys longer than PyYAML's 128-character simple keys come as `? key` and are skipped.
    A string with a newline is dumped single-quoted with a blank line in it, which ends
    the record early: EasyR1 logs numbers only, and a string is no metric anyway."""

    lines: int = 0
    levels: list[_Level] = field(default_factory=lambda: [_Level(0, "")])
    opening: _Level | None = None  # a `key:` whose entries have not come yet
    pending: _Object | None = None
    pairs: list[tuple[str, Number]] = field(default_factory=list)
    dtypes: dict[str, _Dtype] = field(default_factory=dict)  # this dump's anchored dtypes
    anchored: dict[str, Number] = field(default_factory=dict)  # and its anchored values

    def step(self, step: int) -> ConsoleStep:
        self._close_pending()
        metrics = _metrics(self.pairs, _as_read)
        return _step(step, metrics, _VALIDATION_PREFIXES[EASYR1])

    def feed(self, text: str) -> bool:
        """Take one line; False when it cannot be part of this dump."""
        content = text.lstrip(" ")
        indent = len(text) - len(content)
        if self._inside_pending(indent, content):
            return True
        self._close_pending()
        if indent == 0 and not self._top_level(content):
            return False
        self.lines += 1
        if content.startswith("-"):
            self.opening = None  # a sequence's item: no metric, and the `key:` held a list
        elif len(self.pairs) <= 4 * MAX_METRICS:
            self._entry(indent, content)
        return True

    def _top_level(self, content: str) -> bool:
        """What a dump's unindented line can be: an entry, an item, `{}` (nothing), or a
        key too long for a simple key (`? key` and `: value`, stepped over)."""
        return (content == "{}" or content.startswith(("-", "? ", ": "))
                or _yaml_key(content) is not None)

    def _inside_pending(self, indent: int, content: str) -> bool:
        pending = self.pending
        if pending is None:
            return False
        # PyYAML writes a mapping's sequence at the key's own indent ("- item").
        if indent > pending.indent or (indent == pending.indent and content.startswith("-")):
            if len(pending.lines) < 64:  # a numpy scalar takes 17; more is something else
                pending.lines.append(content)
            return True
        return False

    def _close_pending(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None and pending.numpy_scalar:
            value = _numpy_scalar(pending.lines, self.dtypes)
            self.pairs.append((pending.key, value))
            if pending.anchor is not None and len(self.anchored) < 4 * MAX_METRICS:
                self.anchored[pending.anchor] = value

    def _entry(self, indent: int, content: str) -> None:
        if self.opening is not None and indent > self.opening.indent:
            self.levels.append(_Level(indent, self.opening.prefix))
        self.opening = None
        while self.levels[-1].indent > indent and len(self.levels) > 1:
            self.levels.pop()
        parsed = _yaml_key(content)
        if self.levels[-1].indent != indent or parsed is None:
            return  # a long string's next line, or something no metric dump writes
        key, value = parsed
        full = self.levels[-1].prefix + key
        if len(full) > MAX_KEY_CHARS:
            full = _TOO_LONG  # and so its entries' keys, without building them ever longer
        # A numpy scalar that is one object under two keys is dumped once, anchored
        # (`&id002 !!python/...`), and named again by its alias (`*id002`).
        anchor = None
        if value.startswith("&"):
            anchor, _, value = value[1:].partition(" ")
        if value == "":
            self.opening = _Level(indent, full + "/")
        elif value.startswith("!"):
            numpy_scalar = value.endswith("multiarray.scalar")
            self.pending = _Object(full, indent, numpy_scalar, anchor)
        elif value.startswith("*"):
            self.pairs.append((full, self.anchored.get(value[1:], _SKIP)))
        else:
            self.pairs.append((full, _yaml_number(value)))


def _easyr1_header(text: str) -> int | None:
    """`Step N`, the line ConsoleLogger.log prints before the YAML."""
    return _step_number(text[len("Step ") :]) if text.startswith("Step ") else None


@dataclass
class _Block:
    """One EasyR1 record being read: its header, then its YAML lines."""

    step: int
    start: int
    yaml: _Yaml = field(default_factory=_Yaml)


def _read_easyr1(data: bytes, at_end: bool) -> tuple[list[ConsoleStep], int]:
    steps: list[ConsoleStep] = []
    consumed = 0
    block: _Block | None = None
    for start, end in _lines(data):
        text = _text(data[start:end]) if end - start <= MAX_RECORD_BYTES else None
        if block is not None and (text is None or end - block.start > MAX_RECORD_BYTES):
            block = None  # garbage, or a record too long to be one: it costs only itself
        if block is not None:
            if text == "":  # print's own newline after yaml.dump's: the record is whole
                if block.yaml.lines:  # a dump has a line at least (`{}`): else no record
                    steps.append(block.yaml.step(block.step))
                block = None
            elif block.yaml.feed(text or ""):
                continue
            else:
                # A line no YAML dump writes: the record ended without its blank line.
                if block.yaml.lines:
                    steps.append(block.yaml.step(block.step))
                block = None
        if block is None:
            consumed = end
            step = _easyr1_header(text) if text else None
            if step is not None:
                block = _Block(step=step, start=start)
    if block is not None and not at_end and len(data) - block.start <= MAX_RECORD_BYTES:
        return steps, block.start  # still being written: read it whole next time
    return steps, _tail_consumed(data, consumed if block is None else len(data), at_end)


def _as_read(value: Number) -> Number:
    return value


def _yaml_key(content: str) -> tuple[str, str] | None:
    """`key: value` or `key:` (plain, 'single' or "double" quoted key) -> (key, value)."""
    if content[:1] in ("'", '"'):
        end = _yaml_quote_end(content)
        if end < 0:
            return None
        key, rest = _yaml_unquote(content[: end + 1]), content[end + 1 :]
    else:
        at = content.find(": ")
        at = at if at >= 0 else (len(content) - 1 if content.endswith(":") else -1)
        if at <= 0 or content.startswith(("? ", "- ", "#")):
            return None
        key, rest = content[:at], content[at:]
    if rest != ":" and not rest.startswith(": "):
        return None
    return key, rest[2:].strip()


def _yaml_quote_end(content: str) -> int:
    """The index of the closing quote: '' is a quote inside '...', \\x an escape in "..."."""
    quote = content[0]
    pos = 1
    while pos < len(content):
        char = content[pos]
        if quote == '"' and char == "\\":
            pos += 2
            continue
        if char == quote:
            if quote == "'" and content.startswith("''", pos):
                pos += 2
                continue
            return pos
        pos += 1
    return -1


def _yaml_unquote(literal: str) -> str:
    if literal[0] == "'":
        return literal[1:-1].replace("''", "'")
    try:  # YAML's double-quoted escapes are JSON's and a few more, rare in a key
        value = json.loads(literal)
    except ValueError:
        return literal[1:-1]
    return value if isinstance(value, str) else literal[1:-1]


_YAML_SPECIAL: dict[str, float | None] = {
    ".nan": None, ".NaN": None, ".NAN": None, ".inf": None, ".Inf": None, ".INF": None,
    "-.inf": None, "-.Inf": None, "-.INF": None, "+.inf": None, "null": None, "~": None,
    "true": 1.0, "false": 0.0, "True": 1.0, "False": 0.0,
}


def _yaml_number(value: str) -> Number:
    """A scalar as PyYAML's representer writes it: `0.25`, `1.0e+20`, `.nan`, `3`, `true`.
    Quoted strings, `{}` and `[]` are no number."""
    if value in _YAML_SPECIAL:
        return _YAML_SPECIAL[value]
    if value[:1] in ("'", '"', "{", "[", "|", ">", "&", "*") or len(value) > _MAX_NUMBER_CHARS:
        return _SKIP
    try:
        return _finite(float(value))
    except ValueError:
        return _SKIP


# struct's letter for each numpy dtype code a metric can have (np.mean gives "f8").
_NUMPY_CODES = {
    "f2": "e", "f4": "f", "f8": "d", "i1": "b", "i2": "h", "i4": "i", "i8": "q",
    "u1": "B", "u2": "H", "u4": "I", "u8": "Q", "b1": "?",
}


@dataclass
class _Dtype:
    """What a dumped numpy dtype says: its code ("f8") and byte order ("<", ">", "|")."""

    code: str | None = None
    order: str | None = None


def _numpy_scalar(lines: list[str], dtypes: dict[str, _Dtype]) -> Number:
    """A numpy scalar as PyYAML dumps it: the dtype code in `args`, the byte order as the
    second item of `state`, the value's raw bytes after `!!binary |`. One dump writes a
    dtype once, anchored (`- &id001 !!python/object/apply:numpy.dtype`), and later
    scalars of that dtype name it (`- *id001`): `dtypes` holds this dump's anchors."""
    dtype = _Dtype()
    section = ""
    state_items = 0
    encoded: list[str] = []
    for line in lines:
        if line.startswith("- *"):
            dtype = dtypes.get(line[3:].strip(), dtype)
            section = "alias"
        elif line.startswith("- &") and line.endswith("numpy.dtype"):
            if len(dtypes) < 64:
                dtypes[line[3:].split(" ", 1)[0]] = dtype
            section = "dtype"
        elif line in ("args:", "- !!binary |") or line.startswith("state:"):
            section = line
        elif section == "args:" and line.startswith("- ") and dtype.code is None:
            dtype.code = line[2:].strip("'\"")
        elif section.startswith("state:") and line.startswith("- "):
            state_items += 1
            dtype.order = line[2:].strip("'\"") if state_items == 2 else dtype.order
        elif section == "- !!binary |":
            encoded.append(line)
    return _unpack(dtype.code, dtype.order, "".join(encoded))


def _unpack(code: str | None, order: str | None, encoded: str) -> Number:
    if code is not None and code[:1] == "c":
        return None  # complex: a number, but none a chart can show
    letter = _NUMPY_CODES.get(code or "")
    if letter is None or len(encoded) > 64:
        return _SKIP
    try:
        raw = base64.b64decode(encoded, validate=True)
        (value,) = struct.unpack((">" if order == ">" else "<") + letter, raw)
    except (binascii.Error, struct.error, ValueError):
        return _SKIP
    return _finite(float(value))


# -- Ray Train's own worker log ------------------------------------------------------------
# Ray Train V2 sets up logging in each rank's RayTrainWorker (ray/train/v2/_internal/
# logging/logging.py, LoggingManager): its "ray.train" logger and the root logger write
# JSON lines (ray's JSONFormatter) to `<session>/logs/train/ray-train-app-worker-<worker
# id>.log`, with no configuration, each line naming the run (`run_name`), the rank
# (`world_rank`) and the job. Two of its messages are read:
# - train/torch/config.py (`_setup_torch_process_group`):
#   `Setting up process group for: env:// [rank=0, world_size=2]`, when the ranks start;
# - execution/context.py (`_wait_then_report`), every `ray.train.report` of every rank:
#   `Reporting training result 3: TrainingReport(checkpoint=None, metrics={'loss': 0.5},
#   validation=False) from rank 0` (training_report.py's repr; the metrics a dict's repr).
_TRAIN_REPORT = "Reporting training result "
_TRAIN_GROUP = "Setting up process group for: "


@dataclass(frozen=True)
class TrainLogLine:
    """One line of a rank's Ray Train log that says something raywatch reads."""

    run_name: str
    rank: int
    world_size: int | None  # said when its process group was set up
    step: int | None  # a report's index (1, 2, ...): None for the process group line
    metrics: dict[str, float | None]
    at_ns: int | None  # the line's timestamp_ns


def read_train_log(data: bytes, at_end: bool = False) -> tuple[list[TrainLogLine], int]:
    """The lines of a Ray Train worker log in `data` that start a rank or report a step,
    and how many bytes were consumed (as read_console). Any other line, and a line that
    is no JSON object of Ray's shape, is skipped."""
    found: list[TrainLogLine] = []
    consumed = 0
    try:
        for start, end in _lines(data):
            consumed = end
            if end - start <= MAX_RECORD_BYTES:
                line = _train_line(data[start:end])
                if line is not None:
                    found.append(line)
    except Exception:  # a bug here must not stop the agent's tailing: skip what was read
        return found, len(data)
    return found, _tail_consumed(data, consumed, at_end)


def _train_line(raw: bytes) -> TrainLogLine | None:
    if _TRAIN_REPORT.encode() not in raw and _TRAIN_GROUP.encode() not in raw:
        return None  # most lines: not decoded at all
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    message, run_name, rank = (record.get("message"), record.get("run_name"),
                               record.get("world_rank"))
    if not isinstance(message, str) or not isinstance(run_name, str) or not run_name \
            or not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 1 << 20:
        return None
    at = record.get("timestamp_ns")
    at_ns = at if isinstance(at, int) and not isinstance(at, bool) and at > 0 else None
    if message.startswith(_TRAIN_GROUP):
        size = message.rpartition("world_size=")[2].rstrip("]").strip()
        world = _step_number(size)
        return TrainLogLine(run_name[:MAX_KEY_CHARS], rank, world, None, {}, at_ns)
    if not message.startswith(_TRAIN_REPORT):
        return None
    index, sep, rest = message[len(_TRAIN_REPORT):].partition(": TrainingReport(")
    step = _step_number(index)
    _, sep2, rest = rest.partition("metrics=")
    found = _with_dict(step, rest) if sep and sep2 else None
    if found is None:
        return None
    return TrainLogLine(run_name[:MAX_KEY_CHARS], rank, None, found[0],
                        _metrics(found[1], _number_from_repr), at_ns)
