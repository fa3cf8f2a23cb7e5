"""The deploy files as the deploy tests read them: docker-compose.yml with its ${…}
resolved as Compose resolves them, the Dockerfile stage by stage, a requirements lock
package by package."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([^\s;\\]+)")


class Unset(Exception):
    """A `${NAME:?message}` whose variable is not set: Compose refuses to start."""


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def resolved(value: Any, env: Mapping[str, str]) -> Any:
    """`value` (a compose document or any part of it) with its variables replaced."""
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, list):
        return [resolved(v, env) for v in value]
    if isinstance(value, dict):
        return {k: resolved(v, env) for k, v in value.items()}
    return value


def interpolate(text: str, env: Mapping[str, str]) -> str:
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            end = _closing_brace(text, i + 1)
            out.append(_variable(text[i + 2:end], env))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    depth = 0
    for at in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[at], 0)
        if depth == 0:
            return at
    raise ValueError(f"unclosed ${{ in {text!r}")


def _variable(expression: str, env: Mapping[str, str]) -> str:
    match = re.fullmatch(r"(\w+)(?:(:?[-?])(.*))?", expression, re.S)
    assert match, expression
    name, operator, rest = match.groups()
    value = env.get(name)
    missing = value is None or (value == "" and operator in (":-", ":?"))
    if missing and operator in (":?", "?"):
        raise Unset(f"{name}: {rest}")
    if missing and operator in (":-", "-"):
        return interpolate(rest, env)
    return value or ""


def networks_of(service: Mapping[str, Any]) -> set[str]:
    return set(service.get("networks", ["default"]))


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions, continuation lines joined, ARG defaults applied."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stages: dict[str, list[tuple[str, str]]] = {}
    args: dict[str, str] = {}
    for line in text.splitlines():
        instruction, _, rest = line.strip().partition(" ")
        instruction = instruction.upper()
        if not instruction or instruction.startswith("#"):
            continue
        if instruction == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
        elif instruction == "FROM":
            stage = rest.split()[-1]
            stages[stage] = []
        else:
            stages[stage].append((instruction, interpolate(" ".join(rest.split()), args)))
    return stages


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
