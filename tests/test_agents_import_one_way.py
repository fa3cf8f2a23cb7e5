"""The agents app has a room of its own: it may use the GPU, actions and core code, but
only the URLs, the ASGI entry point (the reports route in front of Django) and the
actions app's executor and targets (one small surface, agents/remote.py) import it;
and the node agent itself (collectors/agent) imports nothing of the dashboard."""

from __future__ import annotations

from tests.test_actions_imports import graph


def test_only_the_urls_the_entry_point_and_the_executor_import_the_agents_app() -> None:
    importers = {mod: {n for n in names if n.startswith("dashboard.agents")}
                 for mod, names in graph("dashboard").items()
                 if not mod.startswith("dashboard.agents")}
    assert {mod: names for mod, names in importers.items() if names} == {
        "dashboard.urls": {"dashboard.agents", "dashboard.agents.api",
                           "dashboard.agents.coverage_api", "dashboard.agents.views"},
        "dashboard.asgi": {"dashboard.agents.reports"},
        "dashboard.actions.executor": {"dashboard.agents.remote"},
        "dashboard.actions.targets": {"dashboard.agents.remote"},
    }


def test_the_node_agent_imports_no_dashboard_code() -> None:
    used = {n for names in graph("collectors.agent").values() for n in names}
    assert not {n for n in used if n.startswith("dashboard")}
