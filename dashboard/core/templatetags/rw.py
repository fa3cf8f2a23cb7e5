"""raywatch's template filters (`{% load rw %}`).

`{{ moment|stamp }}`: one time format on every page, rendered on the server the way
static/raywatch/time.js renders it in the browser: "2026-11-23 15:41:55 UTC · 3 min ago"
in a <time class="stamp"> that time.js re-renders in the viewer's zone when
RAYWATCH_TIME_DISPLAY=local, and whose age it keeps current. `|stamp:"abs"` leaves out
the age, `|stamp:"time"` the date too (beside a moment that gives it).

`{{ id|wbr }}`: a long id that may wrap only after its separators (`/`, `:`, `_`, `=`),
never in the middle of a word.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()
MODES = ("ago", "abs", "time")
SEPARATORS = re.compile(r"([/:_=])")


def age(seconds: float) -> str:
    """A coarse length for ages, as time.js's age(): 42 s, 3 min, 5 h, 3 d."""
    s = abs(seconds)
    if s < 90:
        return f"{round(s)} s"
    if s < 5400:
        return f"{round(s / 60)} min"
    if s < 172800:
        return f"{round(s / 3600)} h"
    return f"{round(s / 86400)} d"


def ago(moment: datetime, now: datetime) -> str:
    s = (now - moment).total_seconds()
    if abs(s) < 2:
        return "just now"
    return f"{age(s)} ago" if s >= 0 else f"in {age(s)}"


@register.filter
def stamp(moment: datetime | None, mode: str = "ago") -> SafeString | str:
    if moment is None or moment == "":
        return ""
    if mode not in MODES:
        raise template.TemplateSyntaxError(f"stamp: mode {mode!r} is not one of {MODES}")
    utc = moment.astimezone(UTC)
    iso = utc.isoformat().replace("+00:00", "Z")
    text = f"{utc:%H:%M:%S} UTC" if mode == "time" else f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    title = f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    if mode != "ago":
        return format_html('<time class="stamp" datetime="{}" data-mode="{}" title="{}">{}</time>',
                           iso, mode, title, text)
    # raywatch.css puts " · " before the age, or a line break in tables.
    return format_html('<time class="stamp" datetime="{}" data-mode="ago" title="{}">{}'
                       '<span class="ago">{}</span></time>', iso, title, text,
                       ago(utc, timezone.now()))


@register.filter
def wbr(text: object) -> SafeString:
    return mark_safe(SEPARATORS.sub(r"\1<wbr>", escape(str(text))))  # escaped first
