"""Roles are Django groups: viewer (read), operator (read and act), admin.

A superuser counts as admin. Every page and endpoint needs at least viewer.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from rest_framework.permissions import BasePermission

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
_RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}


def role_of(user: AbstractBaseUser | AnonymousUser) -> str | None:
    if not user or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))  # type: ignore[attr-defined]
    for role in (ADMIN, OPERATOR, VIEWER):
        if role in names:
            return role
    return None


def has_role(user: Any, needed: str) -> bool:
    role = role_of(user)
    return role is not None and _RANK[role] >= _RANK[needed]


class IsViewer(BasePermission):
    needed = VIEWER
    message = "You need the viewer role (or higher) for this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return has_role(request.user, self.needed)


class IsOperator(IsViewer):
    needed = OPERATOR
    message = "You need the operator role for this."


class IsAdmin(IsViewer):
    needed = ADMIN
    message = "You need the admin role for this."
