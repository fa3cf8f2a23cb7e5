"""`make test PYTEST_ARGS=...`: what the runner takes for a selection of its own (one
process, exactly as asked) and what it passes on to its usual split."""

from __future__ import annotations

import pytest

from tests.runner import as_asked


@pytest.mark.parametrize(("argv", "one_process"), [
    ([], False),
    (["-x", "--durations=0"], False),
    (["-p", "cpuprof", "--maxfail", "3"], False),  # a plugin, a count: no selection
    (["-pcpuprof"], False),
    (["tests/test_live_push.py"], True),
    (["-p", "cpuprof", "tests/test_live_push.py::test_one"], True),
    (["-m", "ray"], True),
    (["-kpush"], True),
])
def test_only_files_tests_or_a_selection_run_as_asked(argv: list[str], one_process: bool
                                                      ) -> None:
    assert as_asked(argv) is one_process
