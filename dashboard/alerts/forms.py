from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from dashboard.alerts.models import Channel
from dashboard.alerts.urlguard import InvalidUrl, check_url, mask_url


class ChannelForm(forms.ModelForm):
    """The URL and secret are write-only: left empty on edit, the stored ones stay."""

    url = forms.CharField(required=False, widget=forms.TextInput(attrs={"autocomplete": "off"}),
                          help_text="the webhook URL; it is a credential and is never shown "
                                    "again in full")
    secret = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False),
                             help_text="generic webhook only: signs each request (HMAC-SHA256)")
    kinds = forms.CharField(required=False, help_text="incident kinds, comma-separated, globs "
                                                      "allowed (trial_*); empty: all kinds")

    class Meta:
        model = Channel
        fields = ["name", "kind", "url", "secret", "kinds", "min_severity", "send_resolved",
                  "disabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["url"] = ""
            self.initial["kinds"] = ", ".join(self.instance.kinds)
            self.fields["url"].help_text = f"now {mask_url(self.instance.url)}; empty keeps it"
        else:
            self.initial["kinds"] = ""

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

    def clean_kinds(self) -> list[str]:
        return [k.strip() for k in self.cleaned_data.get("kinds", "").split(",") if k.strip()]

    def save(self, commit: bool = True) -> Channel:
        channel = super().save(commit=False)
        if not channel.disabled:
            channel.disabled_reason = ""
        if commit:
            channel.save()
        return channel


class SilenceForm(forms.Form):
    kind = forms.CharField(required=False, max_length=200)
    severity = forms.CharField(required=False, max_length=200)
    subject = forms.CharField(required=False, max_length=500)
    experiment = forms.CharField(required=False, max_length=300)
    node = forms.CharField(required=False, max_length=200, help_text="node IP, or a glob")
    hours = forms.FloatField(min_value=0.05, max_value=24 * 90, initial=2,
                             help_text="how long it lasts, from now")
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000)

    def window(self) -> tuple[Any, Any]:
        now = timezone.now()
        return now, now + timedelta(hours=self.cleaned_data["hours"])
