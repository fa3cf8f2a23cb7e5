from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "dashboard.cluster"
    label = "cluster"

    def ready(self) -> None:
        from dashboard.cluster.views_data import cluster_payload, narrow_jobs
        from dashboard.core.push import (
            CLUSTER_GROUP,
            DEMANDS_GROUP,
            JOBS_GROUP,
            SCOPED,
            rows_in_cluster,
        )

        # A page scoped to one cluster (the header's switcher) gets only its rows.
        SCOPED[CLUSTER_GROUP] = lambda _data, name: cluster_payload(name)
        SCOPED[JOBS_GROUP] = narrow_jobs
        SCOPED[DEMANDS_GROUP] = rows_in_cluster
