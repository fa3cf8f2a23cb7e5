"""Text a trial wrote (its error message, its experiment's name) reaches chat as text:
no link a reader could click, no @everyone/@here and no Slack <!channel> comes of it.
Only raywatch's own links are live. Checked on the exact JSON each service received."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.alerting import Detector, route, send_all, webhook

pytestmark = pytest.mark.django_db
BASE = "https://raywatch.example.org"
EVIL = "https://evil.example/login"
SUMMARY = (f"trial t_1 failed: [click here]({EVIL}) <{EVIL}|Open in raywatch> <!channel> "
           "<@U024BE7LH> @everyone @here")
EXPERIMENT = f"[asha]({EVIL})"


@pytest.fixture
def sent(alert_settings, receivers) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    got = {kind: receivers(200) for kind in ("slack", "discord", "teams")}
    for kind, receiver in got.items():
        webhook(receiver.url, name=f"ops-{kind}", kind=kind)
    Detector().find(f"trial:{EXPERIMENT}/t_1", severity="critical", experiment=EXPERIMENT,
                    node_ip="10.0.0.5", summary=SUMMARY)
    route()
    assert send_all() == 3
    return {kind: receiver.requests[0].json for kind, receiver in got.items()}


def texts(value: Any) -> list[str]:
    """Every string in a JSON value but URLs raywatch set (button and embed targets)."""
    if isinstance(value, dict):
        return [t for k, v in value.items() if k != "url" for t in texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return [value] if isinstance(value, str) else []


def live_markdown_links(text: str) -> list[str]:
    """[label](target) with neither bracket nor parenthesis escaped, as Discord and Teams
    render it."""
    return re.findall(r"(?<!\\)\[[^\]]*?(?<!\\)\]\((?!\\)", text)


def pings(text: str) -> list[str]:
    return re.findall(r"@(?:everyone|here)\b", text)


def test_slack_shows_trial_text_as_text(sent: dict[str, Any]) -> None:
    message = sent["slack"]
    for block in message["blocks"]:
        for part in [block.get("text"), *block.get("elements", [])]:
            if part and part["type"] == "mrkdwn":
                # No link comes of a bare URL or an @-name in it either.
                assert part.get("verbatim") is True, part
                for target in re.findall(r"<([^>]*)>", part["text"]):
                    assert target.startswith(BASE), (target, part["text"])
    assert "<" not in message["text"]  # the notification's text: no <!channel>, no link
    assert any("&lt;!channel&gt;" in t for t in texts(message))  # shown, as text


@pytest.mark.parametrize("kind", ["discord", "teams"])
def test_markdown_services_show_trial_text_as_text(sent: dict[str, Any], kind: str) -> None:
    shown = texts(sent[kind])
    assert not [t for t in shown if live_markdown_links(t)], shown
    assert not [t for t in shown if pings(t)], shown
    assert not [t for t in shown if re.search(r"(?<!\\)<[@!#]", t)], shown  # <@U…>, <!here>
    # What the trial wrote is still there to read.
    assert any("click here" in t and "evil.example" in t for t in shown), shown


def test_discord_pings_nobody_and_links_only_to_raywatch(sent: dict[str, Any]) -> None:
    message = sent["discord"]
    assert message["allowed_mentions"] == {"parse": []}
    assert all(embed["url"].startswith(BASE) for embed in message["embeds"])
