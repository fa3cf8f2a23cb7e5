"""One value out of a JSON column, by a path whose parts say what they are: a `str` is an
object's member, an `int` an array's element.

Django's KeyTransform reads any key made of digits as an array index (`-> 0` on
Postgres, `$[0]` on SQLite), so a metric or hyperparameter named "0" or "1" (Tune
flattens nested configs into such names; people name metrics by step) read as null, and
sorting or charting by it showed nothing.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import F
from django.db.models.fields.json import KeyTransform


class JsonPath(KeyTransform):
    """`column`'s value at `path`, decoded as KeyTransform's values are."""

    def __init__(self, column: str, *path: str | int) -> None:
        if not path:
            raise ValueError("JsonPath needs at least one key")
        super().__init__(str(path[-1]), F(column))
        self.path = path

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, params = compiler.compile(self.lhs)
        return f"({lhs} #> %s)", (*params, [str(part) for part in self.path])

    def as_sqlite(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, params = compiler.compile(self.lhs)
        return f"JSON_EXTRACT({lhs}, %s)", (*params, sqlite_path(self.path))


def sqlite_path(path: tuple[str | int, ...]) -> str:
    """SQLite's JSON path: `$."name"` for a member (quoted: digits stay a name), `[n]`
    for an element."""
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{json.dumps(part)}"
                         for part in path)
