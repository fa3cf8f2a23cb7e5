from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "dashboard.agents"
    label = "agents"
