from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from dashboard.alerts.models import Channel
from dashboard.alerts.urlguard import InvalidUrl, check_url, mask_url
from dashboard.cluster.models import Cluster
from dashboard.incidents.kinds import FAMILIES, KINDS
from dashboard.incidents.models import SEVERITIES, Incident


def kind_choices(*extra: str) -> list[tuple[str, str]]:
    """The kinds detectors open, the globs that take a family of them, and kinds seen in
    the database or already chosen (`extra`) that neither lists."""
    seen = set(Incident.objects.values_list("kind", flat=True).distinct())
    known = set(KINDS) | set(FAMILIES)
    others = sorted((seen | {e for e in extra if e}) - known)
    return ([(glob, f"{glob} (every {glob[:-2]} kind)") for glob in FAMILIES]
            + [(k, k) for k in (*KINDS, *others)])


class ChannelForm(forms.ModelForm):
    """The URL and secret are write-only: left empty on edit, the stored ones stay."""

    url = forms.CharField(label="Webhook URL", required=False,
                          widget=forms.TextInput(attrs={"autocomplete": "off", "size": 60}),
                          help_text="a credential: never shown again in full")
    secret = forms.CharField(label="Signing secret", required=False,
                             widget=forms.PasswordInput(render_value=False),
                             help_text="generic webhook only: signs each request (HMAC-SHA256)")
    kinds = forms.MultipleChoiceField(label="Incident kinds", required=False,
                                      widget=forms.CheckboxSelectMultiple,
                                      help_text="none ticked: every kind")
    clusters = forms.MultipleChoiceField(label="Clusters", required=False,
                                         widget=forms.CheckboxSelectMultiple,
                                         help_text="none ticked: every cluster")

    class Meta:
        model = Channel
        fields = ["name", "kind", "url", "secret", "kinds", "clusters", "min_severity",
                  "send_resolved", "disabled"]
        labels = {"kind": "Service", "min_severity": "Minimum severity",
                  "send_resolved": "Send resolved notices",
                  "disabled": "Disabled (sends nothing)"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kinds"].choices = kind_choices(*self.instance.kinds)
        names = [*Cluster.objects.values_list("name", flat=True)]
        self.fields["clusters"].choices = [(n, n) for n in
                                           dict.fromkeys([*names, *self.instance.clusters])]
        self.fields["kind"].choices = [("", "choose a service"), *Channel.KINDS]
        if self.instance.pk:
            self.initial["url"] = ""
            self.fields["url"].help_text = f"now {mask_url(self.instance.url)}; empty keeps it"

    def clean_url(self) -> str:
        url = self.cleaned_data.get("url", "").strip()
        if not url:
            if not self.instance.pk:
                raise forms.ValidationError("a webhook URL is needed")
            return self.instance.url
        try:
            return check_url(url, settings.WEBHOOK_ALLOW_PRIVATE)
        except InvalidUrl as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_secret(self) -> str:
        secret = self.cleaned_data.get("secret", "")
        return secret or (self.instance.secret if self.instance.pk else "")

    def save(self, commit: bool = True) -> Channel:
        channel = super().save(commit=False)
        if not channel.disabled:
            channel.disabled_reason = ""
        if commit:
            channel.save()
        return channel


class SilenceForm(forms.Form):
    """Matchers as the silence stores them; kind and severity offered as the choices
    that exist (the API takes any glob)."""

    kind = forms.ChoiceField(required=False)
    severity = forms.ChoiceField(required=False,
                                 choices=[("", "any severity"), *[(s, s) for s in SEVERITIES]])
    subject = forms.CharField(required=False, max_length=500,
                              help_text="exact, or a glob: trial:asha/*")
    experiment = forms.CharField(required=False, max_length=300)
    node = forms.CharField(label="Node IP", required=False, max_length=200,
                           help_text="exact, or a glob: 10.0.0.*")
    cluster = forms.CharField(required=False, max_length=200,
                              help_text="its name, or a glob: gpu-*")
    hours = forms.FloatField(label="Lasts (hours)", min_value=0.05, max_value=24 * 90, initial=2,
                             help_text="from now")
    comment = forms.CharField(label="Why", widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                              max_length=2000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        wanted = self.data.get("kind") if self.is_bound else self.initial.get("kind")
        self.fields["kind"].choices = [("", "any kind"), *kind_choices(wanted or "")]

    def window(self) -> tuple[Any, Any]:
        now = timezone.now()
        return now, now + timedelta(hours=self.cleaned_data["hours"])
