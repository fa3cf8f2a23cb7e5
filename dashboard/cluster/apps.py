from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "dashboard.cluster"
    label = "cluster"
