from django.apps import AppConfig


class IncidentsConfig(AppConfig):
    name = "dashboard.incidents"
    label = "incidents"

    def ready(self) -> None:
        from dashboard.cluster.views_data import register_firing_counts
        from dashboard.incidents.models import firing_per_cluster

        # The clusters' overview counts each cluster's firing incidents: the cluster app
        # does not import this one.
        register_firing_counts(firing_per_cluster)
