from django.apps import AppConfig


class TrialsConfig(AppConfig):
    name = "dashboard.trials"
    label = "trials"

    def ready(self) -> None:
        from dashboard.trials import rayprobes
        from dashboard.trials.probes import register_activity, register_stack

        # After the node's agent (order 10, registered by dashboard.agents): Ray's
        # reporter. raywatch never reads a trial's process itself, not even on its own
        # host: that host's agent does.
        register_activity(20, "Ray's reporter", rayprobes.ray_activity)
        register_stack(20, "Ray's /worker/traceback", rayprobes.ray_stack)

        from dashboard.trials.detect import register_silence
        from dashboard.trials.lag import reader_lag

        register_silence(reader_lag)  # the central log reader's own lag

        from dashboard.core.push import EXPERIMENTS_GROUP, SCOPED, rows_in_cluster

        SCOPED[EXPERIMENTS_GROUP] = rows_in_cluster  # a page scoped to one cluster

        from dashboard.cluster.retention import register_ahead
        from dashboard.cluster.views_data import register_gpu_hours, register_trials_by_process
        from dashboard.cluster.workload import register_process_names
        from dashboard.trials.process import trial_names_by_actor
        from dashboard.trials.retention import delete_results
        from dashboard.trials.views_data import gpu_hours, running_trials_by_process

        # What the cluster app tells of trials without importing this app: the GPU-hours
        # on its page, who holds what a demand waits for; and a forgotten cluster's
        # results, deleted a batch at a time ahead of it.
        register_gpu_hours(gpu_hours)
        register_trials_by_process(running_trials_by_process)
        register_process_names(trial_names_by_actor)
        register_ahead(delete_results)
