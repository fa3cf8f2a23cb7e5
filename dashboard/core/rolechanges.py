"""Changes to who may see the pages reach the sockets already open: a user who loses
their role, is deactivated or deleted, changes their password or logs out is told to
every socket of theirs (core/consumers.py checks again and closes). The channel layer
is at-most-once: each socket also checks by itself every RAYWATCH_SOCKET_RECHECK_S."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import user_logged_out
from django.contrib.auth.models import Group, User
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete
from django.dispatch import receiver

from dashboard.core.push import HEALTH_GROUP, RECHECK, publish, user_group


def recheck_user(pk: int | None, ended_session: str | None = None) -> None:
    if pk is not None:
        publish(user_group(pk), RECHECK, {"ended": ended_session} if ended_session else {})


@receiver(user_logged_out)
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    # Sent before the session is flushed: the socket of this session is told so, rather
    # than left to find its session still there.
    session = getattr(request, "session", None)
    recheck_user(getattr(user, "pk", None), getattr(session, "session_key", None))


@receiver([post_save, post_delete], sender=User)
def _user_changed(sender: Any, instance: User, **kwargs: Any) -> None:
    recheck_user(instance.pk)


@receiver(m2m_changed, sender=User.groups.through)
def _groups_changed(sender: Any, instance: Any, action: str, reverse: bool,
                    pk_set: set[int] | None, **kwargs: Any) -> None:
    if action not in ("post_remove", "post_clear", "pre_clear"):
        return
    if not reverse:  # user.groups.remove(...) / .clear()
        if action != "pre_clear":
            recheck_user(instance.pk)
        return
    # group.user_set.remove(...) / .clear(): its members, read before they are cleared.
    if action == "pre_clear":
        pk_set = set(instance.user_set.values_list("pk", flat=True))
    elif action == "post_clear":
        return
    for pk in pk_set or ():
        recheck_user(pk)


@receiver([post_save, pre_delete], sender=Group)
def _group_changed(sender: Any, instance: Group, created: bool = False,
                   **kwargs: Any) -> None:
    # A role is a group's name: renamed or deleted, every socket checks again.
    if not created:
        publish(HEALTH_GROUP, RECHECK, {})
