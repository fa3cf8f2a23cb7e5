"""`make test` leaves the machine as it found it: what a run writes to a temporary place
(pytest's tmp_path, data dirs, reports, the temp files of what the tests start) lives
under one dir of its own, removed when the run passes and kept, named, when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import pytest

from bench.harness import database_exists

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = '''
import os
import tempfile


def test_writes_a_temporary_file(tmp_path):
    (tmp_path / "made-by-the-test").write_text("x")
    with tempfile.NamedTemporaryFile(prefix="left-", delete=False) as f:
        f.write(b"x")  # as a started process (a Ray dashboard, a server) leaves one
    assert {outcome}
'''


# Two raywatch databases migrated as tests/served.py does for the raywatch a test starts:
# the second is a copy of the run's first; the sample writes down what that copy came from.
MIGRATING = '''
import json
import os
from pathlib import Path

import psycopg
from tests import served


def test_migrates_twice():
    for _ in range(2):
        with served.scratch_database(os.environ["DATABASE_URL"]) as url:
            served.migrate({{**os.environ, "DATABASE_URL": url}})
            with psycopg.connect(url) as conn:
                assert conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0] > 50
    shared = Path(os.environ[served.MIGRATED_DIR_ENV]) / served.STORE_FILE
    Path({note!r}).write_text(json.loads(shared.read_text())["postgres"])
'''


def run(tmp_path: Path, outcome: str, sample_text: str = SAMPLE
        ) -> tuple[subprocess.CompletedProcess[str], list[Path]]:
    """`make test` on one sample file, the machine's temp dir being `tmp_path/tmp`: the
    run's outcome and what is left in that temp dir."""
    sample = tmp_path / "sample" / "test_sample.py"
    sample.parent.mkdir()
    sample.write_text(sample_text.format(outcome=outcome, note=str(tmp_path / "template")))
    machine_tmp = tmp_path / "tmp"
    machine_tmp.mkdir()
    done = subprocess.run([sys.executable, "-m", "tests.runner", "-p", "no:cacheprovider",
                           str(sample)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(machine_tmp)})
    return done, sorted(machine_tmp.iterdir())


def test_a_passing_run_leaves_no_temporary_file(tmp_path: Path) -> None:
    done, left = run(tmp_path, "True")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert left == []


def test_a_failing_run_keeps_its_temporary_files_and_says_where(tmp_path: Path) -> None:
    done, left = run(tmp_path, "False")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    [scratch] = left
    assert scratch.name.startswith("rwtest-")
    assert f"kept the run's temporary files for a look (tmp_path of each test, logs, JUnit " \
           f"reports): {scratch}" in done.stdout
    assert list(scratch.rglob("left-*")) and list(scratch.rglob("made-by-the-test"))


@pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"),
                    reason="the run's migrated Postgres database: needs the suite's Postgres")
def test_the_runs_migrated_database_is_gone_after_it(tmp_path: Path) -> None:
    done, left = run(tmp_path, "True", MIGRATING)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert left == []
    template = (tmp_path / "template").read_text()
    assert template.startswith("raywatch_migrated_rwtest_")
    admin = urlparse(os.environ["DATABASE_URL"])._replace(path="/postgres").geturl()
    with psycopg.connect(admin) as conn:
        assert not database_exists(conn, template)
