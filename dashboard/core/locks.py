"""Work that two raywatch processes must not do at once: on Postgres a session advisory
lock (let go at the end, or with the connection); the embedded default's SQLite has one
process, whose threads the callers keep apart themselves."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection


@contextmanager
def first_in(lock_id: int) -> Iterator[bool]:
    """True when no other process holds `lock_id`, which is then this one's until the
    end: the caller leaves the work to the process already doing it."""
    if connection.vendor != "postgresql":
        yield True
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock_id])
        mine = bool(cursor.fetchone()[0])
    try:
        yield mine
    finally:
        if mine:
            _unlock(lock_id)


@contextmanager
def in_turn(lock_id: int) -> Iterator[None]:
    """`lock_id` held until the end, after any other process that holds it now."""
    if connection.vendor != "postgresql":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [lock_id])
    try:
        yield
    finally:
        _unlock(lock_id)


def _unlock(lock_id: int) -> None:
    with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_id])
