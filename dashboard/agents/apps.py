from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "dashboard.agents"
    label = "agents"

    def ready(self) -> None:
        from dashboard.agents import callstacks
        from dashboard.agents.freshness import agents_silence
        from dashboard.agents.trialprobes import agent_activity, agent_stack
        from dashboard.cluster.callstacks import register_taker
        from dashboard.trials.detect import register_silence
        from dashboard.trials.probes import register_activity, register_stack

        # A node's own agent sees its processes best: asked before Ray's reporter.
        register_activity(10, "the node's raywatch agent", agent_activity)
        register_stack(10, "the node's raywatch agent", agent_stack)
        # A trial fed only by silent agents is judged up to their last report.
        register_silence(agents_silence)
        # An overdue Ray call's stacks and hang verdict: its node's agent takes them.
        register_taker(callstacks.take)
