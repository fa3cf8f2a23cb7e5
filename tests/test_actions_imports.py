"""The actions code reads in one direction (request -> audit -> executor), a Celery
`tasks.py` of the actions and cluster apps is a thin entry point that no other module
imports (remote work is sent by task name), and "where is Ray" has one home. Read from
the source, imports inside functions included: a lazy import still ties two modules."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRY_POINTS = ("dashboard.actions.tasks", "dashboard.cluster.tasks")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def parse(path: Path) -> ast.Module:
    """ast.parse with the garbage collector held off: on Python 3.11 a finalizer that runs
    Python code mid-parse (an asyncio task's "exception was never retrieved" log, left by
    an earlier test's server) fails the parse with "AST constructor recursion depth
    mismatch", which says nothing about the file."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text())
    finally:
        if enabled:
            gc.enable()


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names
                         if is_module(f"{node.module}.{a.name}"))
    return names


def graph(package: str) -> dict[str, set[str]]:
    folder = ROOT.joinpath(*package.split("."))
    return {module_name(p): imports_of(p) for p in folder.rglob("*.py")
            if "migrations" not in p.parts}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import path that comes back to where it started, one per cycle's entry."""
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(edges.get(path[-1], set()) & edges.keys()):
            if nxt == path[0]:
                found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least module
                walk([*path, nxt])

    for start in sorted(edges):
        walk([start])
    return found


def test_the_actions_modules_import_in_one_direction() -> None:
    assert cycles(graph("dashboard.actions")) == []


def test_no_module_imports_a_task_entry_point() -> None:
    importers = {(mod, entry) for mod, names in graph("dashboard").items()
                 for entry in ENTRY_POINTS if entry in names and mod != entry}
    assert importers == set()


def test_where_ray_is_is_answered_in_one_module() -> None:
    readers = {mod for mod, names in graph("dashboard").items() if "collectors.rayaddress" in names}
    assert readers == {"dashboard.cluster.endpoint"}
