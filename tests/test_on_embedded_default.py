"""Behaviours that must hold on both backends, run again on the embedded default
(SQLite, as `make run` uses it): every query they make works there too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.embedded import pytest_on_embedded_default

ON_BOTH_BACKENDS = [
    "tests/test_terminate_on_this_host.py",
    "tests/test_gpu_history_chart.py",
    "tests/test_ray_lists_nothing.py",
]


@pytest.mark.parametrize("target", ON_BOTH_BACKENDS)
def test_passes_on_sqlite(target: str, tmp_path: Path) -> None:
    result = pytest_on_embedded_default(tmp_path, target)
    assert result.returncode == 0, (f"{target} on SQLite:\n{result.stdout[-6000:]}\n"
                                    f"{result.stderr[-3000:]}")
