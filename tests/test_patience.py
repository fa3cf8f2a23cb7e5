"""The suite's waits are hang detectors written as on a quick machine: on a slower one
they stretch by the run's patience (tests/patience.py), every one alike."""

from __future__ import annotations

import time

import pytest

from tests import patience
from tests.conftest import wait_for
from tests.patience import patient


def test_a_wait_lasts_as_long_as_the_run_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(patience, "PATIENCE", 5)
    began = time.monotonic()
    # True after 0.3 s: past the 0.1 s written, within the 0.5 s that patience 5 allows.
    assert wait_for(lambda: time.monotonic() - began > 0.3, 0.1, 0.01)
    began = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0\.25 s \(0\.05 s x patience 5\)"):
        wait_for(lambda: False, 0.05, 0.01, "nothing")
    assert time.monotonic() - began >= 0.25


@pytest.mark.timeout(7)
def test_a_tests_own_timeout_stretches_alike(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("timeout").args[0] == patient(7)
