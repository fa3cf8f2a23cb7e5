"""Many rows in one statement: an upsert of a whole batch as one JSON parameter.

bulk_create(update_conflicts=True) builds a placeholder per value (psycopg splits such a
query afresh each time) and prepares every value through the field: for the GPUs of 128
nodes (1,024 rows) that was ~0.1 s of this process's CPU a call (bench/gpu_fleet_bench.py).
On Postgres the rows travel as one jsonb parameter through jsonb_to_recordset instead;
other databases keep bulk_create.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction

NUL = "\x00"


def fit_values(model: type[models.Model], values: dict[str, Any]) -> dict[str, Any]:
    """`values` as `model`'s columns keep them, whatever a source sent: a string cut to
    its CharField's max_length, and NUL taken out of every string, JSON's nested ones
    too (Postgres refuses NUL in text and jsonb, and one refused row would fail the
    whole statement; SQLite keeps any length, so the cut is made here on both)."""
    fitted = {}
    for name, value in values.items():
        limit = getattr(model._meta.get_field(name), "max_length", None)
        clean = without_nul(value)
        fitted[name] = clean[:limit] if isinstance(clean, str) and limit else clean
    return fitted


def without_nul(value: Any) -> Any:
    """`value` with NUL taken out of its strings (a JSON value's, at any depth)."""
    if isinstance(value, str):
        return value.replace(NUL, "") if NUL in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(v) for v in value]
    return value


def upsert(model: type[models.Model], objs: Sequence[models.Model], unique: Sequence[str],
           update: Sequence[str]) -> None:
    """Insert `objs`, or update the `update` fields of the row with the same `unique`
    fields; each object's pk is set."""
    if not objs:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs, update_conflicts=True, unique_fields=list(unique),
                                  update_fields=list(update))
        return
    meta = model._meta
    fields = insertable(model)
    keys = [meta.get_field(name) for name in unique]
    quote = connection.ops.quote_name
    names = ", ".join(quote(f.column) for f in fields)
    sets = ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}"
                     for c in (meta.get_field(name).column for name in update))
    keys_sql = ", ".join(quote(f.column) for f in keys)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {meta.db_table} AS t ({names}) SELECT {names} FROM "
            f"jsonb_to_recordset(%s::jsonb) AS v({recordset(fields)}) ON CONFLICT "
            f"({keys_sql}) DO UPDATE SET {sets} RETURNING id, {keys_sql}",
            [inserted_rows(objs, fields)])
        ids = {tuple(key): pk for pk, *key in cursor.fetchall()}
    for obj in objs:
        obj.pk = ids[tuple(getattr(obj, f.attname) for f in keys)]


def insertable(model: type[models.Model]) -> list[models.Field]:
    """The columns an INSERT writes: all but the primary key."""
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def recordset(fields: Sequence[models.Field]) -> str:
    """The column list of jsonb_to_recordset(...) AS v(...): each column with its type."""
    quote = connection.ops.quote_name
    return ", ".join(f"{quote(f.column)} {f.db_type(connection)}" for f in fields)


def inserted_rows(objs: Sequence[models.Model], fields: Sequence[models.Field]) -> str:
    """The rows to insert as one JSON parameter, each field's value as saving sets it
    (auto_now and friends)."""
    return json.dumps([{f.column: f.pre_save(o, add=True) for f in fields} for o in objs],
                      default=json_default)


def json_default(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
