"""The agents app has a room of its own, below the actions app: it may use the GPU,
trials, cluster and core code, never the actions app's (an agent command is bound to an
action's audit entry, which the actions app hands in). Only the URLs, the ASGI entry
point (the reports route in front of Django) and the actions app's one small surface
import it: remote.py signals a process through a node's agent (agents/commands.py,
agents/models.py; what it last listed: agents/remote.py) and targets.py asks which
node's agent answers (agents/remote.py).
The node agent itself (collectors/agent) imports nothing of the dashboard."""

from __future__ import annotations

from tests.test_actions_imports import graph


def test_only_the_urls_the_entry_point_and_the_actions_surface_import_the_agents_app() -> None:
    importers = {mod: {n for n in names if n.startswith("dashboard.agents")}
                 for mod, names in graph("dashboard").items()
                 if not mod.startswith("dashboard.agents")}
    assert {mod: names for mod, names in importers.items() if names} == {
        "dashboard.urls": {"dashboard.agents", "dashboard.agents.api",
                           "dashboard.agents.coverage_api", "dashboard.agents.views"},
        "dashboard.asgi": {"dashboard.agents.reports"},
        "dashboard.actions.remote": {"dashboard.agents.commands", "dashboard.agents.models",
                                     "dashboard.agents.remote"},
        "dashboard.actions.targets": {"dashboard.agents.remote"},
    }


def test_the_agents_app_imports_nothing_of_the_actions_app() -> None:
    used = {(mod, n) for mod, names in graph("dashboard.agents").items()
            for n in names if n.startswith("dashboard.actions")}
    assert used == set()


def test_the_node_agent_imports_no_dashboard_code() -> None:
    used = {n for names in graph("collectors.agent").values() for n in names}
    assert not {n for n in used if n.startswith("dashboard")}
