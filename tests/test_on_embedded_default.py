"""Behaviours that must hold on both backends, run again on the embedded default
(SQLite, as `make run` uses it): every query they make works there too. They are the
files marked `both_backends` (pytest -m both_backends); no tests is a failure (exit 5).

The rerun starts in the background as the session begins (tests/conftest.py,
`pytest_collection_finish`); this test waits for its outcome."""

from __future__ import annotations

from tests.embedded import start_on_embedded_default

# The files marked `pytestmark = pytest.mark.both_backends`: those whose code path makes
# queries of its own (ORM lookups, raw SQL, bulk writes, locking); the pure-rule and
# browser tests add nothing here. A file is in the rerun by carrying the mark. Its tests
# that need a real Ray cluster (`ray`) run on Postgres only: the Ray poll's queries run
# here against a stand-in of Ray's state API (tests/raystandin.py; the call poll and its
# detector: test_ray_calls.py), and the real cluster's minutes would double for nothing
# the stand-in does not reach (the same poll code, the same rows).
RERUN = ("-m", "both_backends and not ray", "tests")
TIMEOUT_S = 900


def test_passes_on_sqlite() -> None:
    # One pytest run for all of them: a Django start-up per file would double the time.
    code, output = start_on_embedded_default(*RERUN).wait(TIMEOUT_S)
    assert code == 0, f"on SQLite (exit {code}):\n{output[-10000:]}"
    assert " passed" in output.splitlines()[-1], output[-2000:]
