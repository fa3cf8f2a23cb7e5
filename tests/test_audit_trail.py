"""The audit trail cannot be rewritten, and each user's actions are rate-limited."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, transaction
from django.test import Client
from django.utils import timezone

from dashboard.actions.models import AuditEntry, AuditStep
from dashboard.actions.service import ActionRefused, Plan, request
from dashboard.core.roles import OPERATOR
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]


def plan(key: str) -> Plan:
    return Plan(AuditEntry.STOP_JOB, key, {"key": key}, OPERATOR, lambda: None)


def test_the_audit_refuses_deletes_and_rewrites(operator) -> None:  # type: ignore[no-untyped-def]
    entry, created = request(operator, lambda: plan("job:a"), {}, "diverged", "10.1.2.3",
                             timezone.now(), OPERATOR)
    assert created and entry.steps.get().step == "requested"
    for change in (lambda: AuditEntry.objects.filter(pk=entry.pk).delete(),
                   lambda: AuditEntry.objects.filter(pk=entry.pk).update(reason="nothing"),
                   lambda: AuditEntry.objects.filter(pk=entry.pk).update(username="someone"),
                   lambda: AuditStep.objects.filter(entry=entry).update(detail="edited"),
                   lambda: AuditStep.objects.filter(entry=entry).delete()):
        # Django's PROTECT stops the first delete; the database's trigger stops the rest.
        with pytest.raises(DatabaseError, match=r"append-only|protected foreign keys"), \
                transaction.atomic():
            change()
    from django.db import connection
    if connection.vendor == "postgresql":  # one statement would empty the trail
        for table in ("actions_auditentry", "actions_auditstep"):
            with pytest.raises(DatabaseError, match="append-only: truncate refused"), \
                    transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the test's pending checks
                cursor.execute(f"TRUNCATE {table} CASCADE")
    # The action itself moves on: state, outcome and times are not history yet.
    AuditEntry.objects.filter(pk=entry.pk).update(state=AuditEntry.SUCCEEDED, outcome="done")
    assert AuditEntry.objects.get(pk=entry.pk).reason == "diverged"


def test_nobody_edits_the_audit_through_the_admin(admin) -> None:  # type: ignore[no-untyped-def]
    admin.is_staff = admin.is_superuser = True  # the Django admin's own superuser
    admin.save()
    browser = Client()
    browser.login(username=admin.username, password=PASSWORD)
    assert browser.get("/admin/").status_code == 200
    assert browser.get("/admin/actions/auditentry/").status_code == 404
    assert browser.get("/audit/").status_code == 200


def test_each_user_has_an_action_budget(settings, operator, admin) -> None:  # type: ignore[no-untyped-def]
    settings.ACTION_RATE, settings.ACTION_RATE_WINDOW_S = 2, 60
    now = timezone.now()
    for key in ("job:a", "job:b"):
        request(operator, lambda k=key: plan(k), {}, "why", "", now, OPERATOR)
    # The same target again is the same action, not a new one: no budget spent.
    _, created = request(operator, lambda: plan("job:a"), {}, "why", "", now, OPERATOR)
    assert not created
    with pytest.raises(ActionRefused) as refused:
        request(operator, lambda: plan("job:c"), {}, "why", "", now, OPERATOR)
    assert refused.value.status == 429
    # Others are unaffected.
    assert request(admin, lambda: plan("job:c"), {}, "why", "", now, OPERATOR)[1]
    # The refusal is audited too.
    assert sorted(AuditEntry.objects.values_list("state", flat=True)) == [
        "refused", "requested", "requested", "requested"]
