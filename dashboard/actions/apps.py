from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "dashboard.actions"
    label = "actions"

    def ready(self) -> None:
        # The trail of what the apps below say they did (core/audit.py): they cannot
        # import this app.
        from dashboard.actions.audit import write_act
        from dashboard.core.audit import Act, operator_act

        operator_act.connect(write_act, sender=Act, dispatch_uid="raywatch-audit-trail")
