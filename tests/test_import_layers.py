"""The dashboard and collectors trees import one way. Each tree's units (its modules and
packages one level down: a Django app, collectors/agent) stand in the layers written
once below, from the ground up. A module imports from its own unit or from a unit of a
lower layer, never from one above it nor from another unit of its own layer (who needs
the other stands above it); and no modules import each other in a circle. Read from the
source, migrations left out and imports inside functions counted
(tests/test_actions_imports.py): a lazy import still ties two modules.

A lower app that needs what a higher one knows has the higher one register it in its
AppConfig.ready(), as dashboard.core.push.EVERY_PAGE and trials.detect.register_silence
do: the cluster app's overview, history, demand holders and retention ask the incidents
and trials apps that way."""

from __future__ import annotations

import pytest

from tests.test_actions_imports import ROOT, cycles, graph

DASHBOARD_LAYERS: tuple[tuple[str, ...], ...] = (
    ("envconf", "celery"),  # the environment read once; the Celery app
    ("settings",),
    ("core",),  # what every app uses: push, health, roles, the scheduler, logins
    ("cluster",),  # Ray's clusters as polled: nodes, actors, jobs, demand, sessions
    ("incidents",),  # what the detectors found, in a cluster
    ("trials", "alerts"),  # Tune's experiments and trials; incidents sent to channels
    ("gpus",),  # GPUs, their processes and owners (trials), their incidents
    ("agents",),  # node agents: their reports (GPUs, trial logs) and commands
    ("actions",),  # terminate, stop, kill: locally, through an agent, through Ray
    ("triage", "metrics"),  # read every app; none imports them
    ("routing",),
    ("urls", "asgi", "wsgi", "settingsdoc", "__init__"),  # what is run or served
)

COLLECTORS_LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "http", "rootfiles", "pystack", "hostinfo", "localray",
     "memory"),  # memory: handing a large poll's freed heap back
    ("records", "tunesearch", "raygrpc", "rayaddress"),  # records: the plain record types
    ("procstat", "nvml", "raylists", "raygpus", "runformats",  # runformats: recognising runs
     "raytrain",  # raytrain: Ray Train V2 runs from its state API
     "consolelogs"),  # consolelogs: steps as RL trainers print them
    ("logscan", "raystate", "simworkload"),
    ("tunelogs", "defaults", "raydemand", "raykill", "raylogs", "rayworkers", "simnvml"),
    ("runlogs",),  # tailing any trial's files (Tune's, TensorBoard's, a file logger's)
    ("agent",),  # the node agent, a program of its own
)

LAYERS = {"dashboard": DASHBOARD_LAYERS, "collectors": COLLECTORS_LAYERS}
TREES = sorted(LAYERS)


def unit(module: str) -> str:
    """The tree's module or package that `module` is in ("__init__": the tree's own)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def source(module: str) -> str:
    base = ROOT.joinpath(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
    return str(path.relative_to(ROOT))


def own_imports(tree: str) -> list[tuple[str, str]]:
    """(importer, imported) for every import of one of the tree's modules by another."""
    modules = graph(tree)
    return sorted((mod, name) for mod, names in modules.items() for name in names
                  if name in modules and name != mod)


@pytest.mark.parametrize("tree", TREES)
def test_no_modules_import_each_other_in_a_circle(tree: str) -> None:
    found = cycles(graph(tree))
    assert not found, "modules that import each other in a circle:\n" + "\n".join(
        " -> ".join(source(m) for m in circle) for circle in found)


@pytest.mark.parametrize("tree", TREES)
def test_every_unit_stands_in_one_layer(tree: str) -> None:
    placed = [u for layer in LAYERS[tree] for u in layer]
    assert len(placed) == len(set(placed)), f"named twice in {tree}'s layers: {placed}"
    unplaced = sorted({unit(m) for m in graph(tree)} - set(placed))
    assert not unplaced, f"{tree}/: give {unplaced} a layer in {tree.upper()}_LAYERS"


@pytest.mark.parametrize("tree", TREES)
def test_imports_run_down_the_layers(tree: str) -> None:
    layer = {u: i for i, units in enumerate(LAYERS[tree]) for u in units}
    wrong = []
    for mod, name in own_imports(tree):
        here, there = unit(mod), unit(name)
        if here == there or here not in layer or there not in layer:
            continue  # inside one unit; an unplaced unit fails the test above
        if layer[here] <= layer[there]:
            way = "up" if layer[here] < layer[there] else "across its own layer"
            wrong.append(f"{source(mod)} imports {name}: {here} (layer {layer[here]}) -> "
                         f"{there} (layer {layer[there]}) runs {way}")
    assert not wrong, f"imports of {tree}/ that do not run down its layers:\n" + "\n".join(wrong)


def test_the_collectors_import_nothing_of_the_dashboard() -> None:
    """collectors/ is the ground the dashboard stands on, and the node agent's code."""
    used = sorted((source(mod), name) for mod, names in graph("collectors").items()
                  for name in names if name.split(".")[0] == "dashboard")
    assert not used
