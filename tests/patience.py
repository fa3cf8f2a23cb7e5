"""How many times slower than the machines its waits were chosen on the suite may run and
still pass.

Every wait in the suite is a hang detector: none passes or fails on time, so a longer one
costs nothing until something hangs. The same commit took 1,721 busy CPU s on one two-core
machine and 3,965 on CI's (2026-11-30, 2.3x), where seven waits ran out, among them
Celery's first Ray poll (120 s). Waits are written as on a quick machine and stretched
here: `wait_for`, Playwright's assertions, the test timeouts (tests/conftest.py), the
bench smokes' and servers' stops. RAYWATCH_TEST_PATIENCE sets another factor.
"""

from __future__ import annotations

import os

PATIENCE = float(os.environ.get("RAYWATCH_TEST_PATIENCE") or 3)


def patient(seconds: float) -> float:
    """A wait's `seconds`, chosen on a quick machine, as this run allows it."""
    return seconds * PATIENCE


def ms(seconds: float) -> float:
    """The same, in milliseconds: Playwright's timeouts."""
    return patient(seconds) * 1000
