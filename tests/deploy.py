"""The deploy files as the deploy tests read them: a requirements lock package by
package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([^\s;\\]+)")


def lock(name: str) -> dict[str, tuple[str, list[str]]]:
    """requirements/NAME.lock: {package: (version, its sha256 hashes)}."""
    text = (ROOT / "requirements" / f"{name}.lock").read_text()
    packages = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text)[1:]:
        match = PIN.match(entry)
        assert match, f"{name}.lock: not a pin: {entry.splitlines()[0]!r}"
        packages[normalized(match[1])] = (match[2], re.findall(r"--hash=sha256:(\w+)", entry))
    return packages


def pins(requirements: list[str]) -> dict[str, str]:
    """{package: version} of `name[extras]==version` lines; anything else is an error."""
    found = {}
    for line in requirements:
        requirement = line.split("#")[0].strip()
        if requirement:
            match = PIN.fullmatch(requirement)
            assert match, f"not pinned with ==: {requirement!r}"
            found[normalized(match[1])] = match[2]
    return found


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
