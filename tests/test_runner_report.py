"""`make test` ends with each failed test and its assertion, from the pytest processes'
JUnit reports: CI pages show a part of a long log, and a batch's FAILURES section in
the middle of it shows the test's source before it shows what failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.runner import failures, totals

SAMPLE = '''
def test_passes():
    assert True


def test_fails():
    reading = {"status": "RUNNING"}
    assert reading["status"] == "ERROR", f"the run is {reading['status']}"
'''


def test_the_end_of_the_run_names_each_failed_test_and_its_assertion(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    report = tmp_path / "sample.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-p", "no:django", f"--junitxml={report}", str(sample)],
                   cwd=tmp_path, capture_output=True, timeout=120)

    [line] = failures([report, tmp_path / "absent.xml"])  # a batch that left no report
    head, _, tail = line.partition("\n")
    assert head.startswith("[make test] FAILED test_sample::test_fails: AssertionError: "
                           "the run is RUNNING")
    assert "assert 'RUNNING' == 'ERROR'" in tail
    assert totals([report]) == "raywatch: 1 passed, 1 failed, 0 skipped"
