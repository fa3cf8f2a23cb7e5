from django.apps import AppConfig


class TrialsConfig(AppConfig):
    name = "dashboard.trials"
    label = "trials"

    def ready(self) -> None:
        from dashboard.trials import hostprobes, rayprobes
        from dashboard.trials.probes import register_activity, register_stack

        # After the node's agent (order 10, registered by dashboard.agents): Ray's
        # reporter, then this host as the last resort.
        register_activity(20, "Ray's reporter", rayprobes.ray_activity)
        register_stack(20, "Ray's /worker/traceback", rayprobes.ray_stack)
        register_activity(30, "raywatch's host", hostprobes.host_activity)
        register_stack(30, "py-spy on raywatch's host", hostprobes.host_stack)

        from dashboard.trials.detect import register_silence
        from dashboard.trials.lag import reader_lag

        register_silence(reader_lag)  # the central log reader's own lag

        from dashboard.core.push import EXPERIMENTS_GROUP, SCOPED, rows_in_cluster

        SCOPED[EXPERIMENTS_GROUP] = rows_in_cluster  # a page scoped to one cluster
