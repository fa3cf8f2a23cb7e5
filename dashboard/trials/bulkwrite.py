"""Writing many rows of one poll at once: new results (COPY through a staging table on
Postgres for a large batch, one multi-row INSERT ... ON CONFLICT DO NOTHING otherwise)
and the changed columns of trials and cursors (one UPDATE statement, sent many times in
one round trip).

The first ingest of a finished search writes hundreds of thousands of results; a row at
a time, or a trial at a time, it went at bulk_create's pace, a fortieth of what COPY
takes (bench/first_ingest_bench.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import orjson
from django.db import IntegrityError, connection, models, transaction

from dashboard.core.bulk import insertable, inserted_rows, json_default, recordset
from dashboard.trials.models import StepResult

# (trial pk, attempt, iteration, at, ingested_at, time_this_iter_s, metrics)
ResultRow = tuple[int, int, int, datetime | None, datetime, float | None, dict[str, Any]]
RESULT_COLUMNS = ("trial_id", "attempt", "iteration", "at", "ingested_at",
                  "time_this_iter_s", "metrics")
# Below this many rows a multi-row INSERT costs no more than COPY's extra statements
# (staging table, INSERT ... SELECT, TRUNCATE): bench/first_ingest_bench.py.
COPY_MIN_ROWS = 1000
STAGING = "raywatch_stepresult_staging"
COPY_CHUNK = 1000  # rows formatted and sent to COPY at a time
NULL = b"\\N"
# Rows a multi-row INSERT: psycopg splits a query with more than 50 placeholders afresh
# each time, in time that grows faster than their number.
ROWS_A_STATEMENT = 50


def insert_results(rows: Sequence[ResultRow], fresh: bool = False) -> int:
    """Store the rows not stored yet (a key already there, the other copy of the same
    file, is left as it is); the number actually inserted. `fresh`: rows of trials that
    had no results and no key twice, so COPY straight into the table is tried first (a
    concurrent writer's row makes it fail, and the staging path then skips that row)."""
    if not rows:
        return 0
    if connection.vendor != "postgresql" or len(rows) < COPY_MIN_ROWS:
        return _insert_ignoring(rows)
    if fresh:
        try:
            with transaction.atomic():
                return _copy(StepResult._meta.db_table, rows)
        except IntegrityError:
            pass
    return _copy_through_staging(rows)


def _copy(table: str, rows: Sequence[ResultRow]) -> int:
    """COPY in its text format, the rows formatted here: psycopg's write_row adapts each
    value by type, and encoding the metrics with the stdlib's JSON cost as much again
    (bench/first_ingest_bench.py)."""
    stamps: dict[datetime, bytes] = {}  # ingested_at: one for a whole poll

    def stamp(value: datetime | None) -> bytes:
        if value is None:
            return NULL
        if (text := stamps.get(value)) is None:
            text = stamps[value] = value.isoformat().encode()
        return text

    with connection.cursor() as cursor, connection.wrap_database_errors:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(RESULT_COLUMNS)}) FROM STDIN") as copy:
            for start in range(0, len(rows), COPY_CHUNK):
                copy.write(b"".join([
                    b"%d\t%d\t%d\t%s\t%s\t%s\t%s\n" % (
                        trial, attempt, iteration,
                        NULL if at is None else at.isoformat().encode(), stamp(ingested),
                        NULL if took is None else b"%r" % took, _copy_json(metrics))
                    for trial, attempt, iteration, at, ingested, took, metrics
                    in rows[start:start + COPY_CHUNK]]))
    return len(rows)


def _copy_json(metrics: dict[str, Any]) -> bytes:
    """The metrics as a COPY text field: JSON holds no raw tab, newline or carriage
    return (orjson escapes them), so its backslashes are all COPY must have doubled.
    Values are finite floats or None (tunelogs.flatten_metrics)."""
    return orjson.dumps(metrics).replace(b"\\", b"\\\\")


def _copy_through_staging(rows: Sequence[ResultRow]) -> int:
    """COPY cannot skip a conflicting row: COPY into a session's temporary table, then
    move what is new with one INSERT ... SELECT ... ON CONFLICT DO NOTHING."""
    table, columns = StepResult._meta.db_table, ", ".join(RESULT_COLUMNS)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} (trial_id bigint, "
            "attempt integer, iteration integer, at timestamptz, ingested_at timestamptz, "
            "time_this_iter_s double precision, metrics jsonb)")
        _copy(STAGING, rows)
        cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {STAGING} "
                       "ON CONFLICT (trial_id, attempt, iteration) DO NOTHING")
        inserted = cursor.rowcount
        cursor.execute(f"TRUNCATE {STAGING}")
    return inserted


def _insert_ignoring(rows: Sequence[ResultRow]) -> int:
    fields = [StepResult._meta.get_field(name.removesuffix("_id")) for name in RESULT_COLUMNS]
    per_statement = max(1, min(ROWS_A_STATEMENT, connection.ops.bulk_batch_size(fields, rows)))
    table, columns = StepResult._meta.db_table, ", ".join(RESULT_COLUMNS)
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    inserted = 0
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start:start + per_statement]
            values = [_prepared(f, v) for row in chunk for f, v in zip(fields, row, strict=True)]
            cursor.execute(f"INSERT INTO {table} ({columns}) VALUES "
                           f"{', '.join([one] * len(chunk))} "
                           "ON CONFLICT (trial_id, attempt, iteration) DO NOTHING", values)
            inserted += cursor.rowcount
    return inserted


def insert_new(model: type[models.Model], objs: Sequence[models.Model]) -> None:
    """Insert rows, leaving out those whose unique key is taken (a concurrent writer's);
    their ids are not set: load them. On Postgres one INSERT ... SELECT FROM
    jsonb_to_recordset(one JSON parameter), for the reason update_rows gives."""
    if not objs:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create(objs, ignore_conflicts=True)
        return
    fields = insertable(model)
    names = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {model._meta.db_table} ({names}) SELECT {names} FROM "
                       f"jsonb_to_recordset(%s::jsonb) AS v({recordset(fields)}) "
                       "ON CONFLICT DO NOTHING", [inserted_rows(objs, fields)])


def update_rows(model: type[models.Model], objs: Iterable[models.Model],
                names: Sequence[str]) -> None:
    """Write these columns of these rows. On Postgres one UPDATE ... FROM
    jsonb_to_recordset(one JSON parameter): bulk_update's CASE per column and row, or a
    statement with a placeholder per value (psycopg splits such a query afresh each
    time), cost ~0.2 ms a trial in this process."""
    objs = list(objs)
    if not objs:
        return
    fields = [model._meta.get_field(name) for name in names]
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(*_update_from_json(model, fields, objs))
        else:
            sets = ", ".join(f"{connection.ops.quote_name(f.column)} = %s" for f in fields)
            cursor.executemany(
                f"UPDATE {model._meta.db_table} SET {sets} WHERE id = %s",
                [[*(_prepared(f, getattr(o, f.attname)) for f in fields), o.pk] for o in objs])


def _update_from_json(model: type[models.Model], fields: Sequence[models.Field],
                      objs: Sequence[models.Model]) -> tuple[str, list[str]]:
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(f.column)} = v.{quote(f.column)}" for f in fields)
    sql = (f"UPDATE {model._meta.db_table} AS t SET {sets} FROM jsonb_to_recordset(%s::jsonb) "
           f"AS v({recordset(fields)}, row_id bigint) WHERE t.id = v.row_id")
    rows = [{**{f.column: getattr(o, f.attname) for f in fields}, "row_id": o.pk} for o in objs]
    return sql, [json.dumps(rows, default=json_default)]


def _prepared(field: models.Field, value: Any) -> Any:
    return field.get_db_prep_save(value, connection)
