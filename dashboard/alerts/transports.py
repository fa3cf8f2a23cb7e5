"""One small class per chat service on one HTTP function (as healthchecks does it).

`post()` is the single outbound seam: it sets a deadline on every socket
operation, refuses schemes other than http/https, checks the address it really
connected to against the SSRF guard, and never follows redirects. A transport
turns a message (see messages.py) into that service's JSON and says whether a
reply is success, a reason to retry, or a permanent error.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import re
import ssl
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from dashboard.alerts.urlguard import ALLOW_PRIVATE_HINT, InvalidUrl, address_problem, split_url

MAX_REPLY_BYTES = 65536
USER_AGENT = "raywatch-alerts/1"


class TransportError(Exception):
    """`permanent`: retrying cannot help. `disable`: the channel itself is broken (its
    URL is gone or refused), so it is disabled and the reason shown on its page."""

    def __init__(self, message: str, permanent: bool = False, disable: bool = False,
                 retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent or disable
        self.disable = disable
        self.retry_after = retry_after
        self.status = status


@dataclass(frozen=True)
class Reply:
    status: int
    text: str
    retry_after: float | None = None


def post(url: str, body: bytes, headers: dict[str, str], timeout_s: float,
         allow_private: bool) -> Reply:
    try:
        parts = split_url(url)
    except InvalidUrl as exc:
        raise TransportError(str(exc), disable=True) from None
    deadline = time.monotonic() + timeout_s
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=timeout_s,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.connect()
        peer = str(conn.sock.getpeername()[0])
        problem = None if allow_private else address_problem(peer)
        if problem:
            raise TransportError(f"{parts.hostname}: {problem}; {ALLOW_PRIVATE_HINT}",
                                 disable=True)
        conn.request("POST", target, body=body, headers={
            "Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
        conn.sock.settimeout(max(0.1, deadline - time.monotonic()))
        response = conn.getresponse()
        text = response.read(MAX_REPLY_BYTES).decode("utf-8", "replace")
        return Reply(response.status, text, _retry_after(response.getheader("Retry-After")))
    except TimeoutError:
        raise TransportError(f"no reply within {timeout_s:g} s (timeout)") from None
    except ssl.SSLError as exc:
        raise TransportError(f"TLS error: {exc.reason or exc}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise TransportError(f"connection failed: {exc.__class__.__name__}: {exc}") from None
    finally:
        conn.close()


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def check_reply(reply: Reply, service: str) -> None:
    if 200 <= reply.status < 300:
        return
    said = f"HTTP {reply.status} from {service}" + (f": {reply.text[:300]}" if reply.text else "")
    if reply.status in (404, 410):
        raise TransportError(f"{said} (the webhook is gone)", disable=True, status=reply.status)
    if reply.status in (401, 403):
        raise TransportError(f"{said} (the webhook refuses us)", disable=True,
                             status=reply.status)
    if reply.status == 429 or reply.status == 408 or reply.status >= 500:
        raise TransportError(said, retry_after=reply.retry_after, status=reply.status)
    raise TransportError(f"{said} (the message was refused)", permanent=True, status=reply.status)


class Transport:
    kind: ClassVar[str] = ""
    service: ClassVar[str] = ""

    def __init__(self, url: str, secret: str = "") -> None:
        self.url, self.secret = url, secret

    def render(self, message: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def headers(self, body: bytes) -> dict[str, str]:
        return {}

    def send(self, message: dict[str, Any], timeout_s: float, allow_private: bool) -> Reply:
        body = json.dumps(self.render(message), separators=(",", ":")).encode()
        reply = post(self.url, body, self.headers(body), timeout_s, allow_private)
        check_reply(reply, self.service)
        return reply


def _since(incident: dict[str, Any]) -> str:
    if incident.get("resolved_at"):
        return f"resolved {incident['resolved_at'][:19].replace('T', ' ')} UTC"
    return f"since {incident['opened_at'][:19].replace('T', ' ')} UTC"


def where(incident: dict[str, Any]) -> str:
    parts = [f"{label} {incident[key]}" for key, label in (
        ("experiment", "experiment"), ("trial_id", "trial"), ("node_ip", "node"), ("gpu", "GPU"))
        if incident.get(key)]
    return " · ".join(parts) or incident["subject"]


SHOWN = 10  # incidents spelled out in a chat message; the rest are counted, and linked


def shown(message: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    incidents = message["incidents"]
    return incidents[:SHOWN], len(incidents) - min(len(incidents), SHOWN) + message["truncated"]


# Text in a message comes from trials (an error message, an experiment's name): each
# service gets it as text, never as a link, a mention or a ping. Only raywatch's own
# links are live.
def _slack_escape(text: str) -> str:
    """Slack's mrkdwn: a link or a mention needs <...>; sent with "verbatim" so that a
    bare URL or @channel in it is not made one either."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


MARKDOWN = re.compile(r"([\\\[\]()*_`~|<>#])")
PING = re.compile(r"@(everyone|here)\b")


def _markdown_escape(text: str) -> str:
    """Discord's and Teams' markdown: each character that makes a link ([label](url)),
    emphasis, code, a spoiler, a quote or a heading is backslashed; @everyone and @here
    get a zero-width space (Discord's allowed_mentions stops the ping, not the look)."""
    return PING.sub("@\u200b\\1", MARKDOWN.sub(r"\\\1", text))


class Slack(Transport):
    kind, service = "slack", "Slack"
    ICONS = {"critical": ":red_circle:", "warning": ":large_orange_circle:",
             "info": ":large_blue_circle:", "resolved": ":white_check_mark:"}

    def render(self, message: dict[str, Any]) -> dict[str, Any]:
        items, more = shown(message)
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": message["title"][:150]}}]
        for i in items:
            icon = self.ICONS["resolved" if i["state"] == "resolved" else i["severity"]]
            summary, place = _slack_escape(i["summary"][:500]), _slack_escape(where(i))
            text = (f"{icon} *{i['severity']}* `{i['kind']}` <{i['url']}|{summary}>\n"
                    f"{place} · {_since(i)}")
            blocks.append({"type": "section",
                           "text": {"type": "mrkdwn", "text": text, "verbatim": True}})
        footer = f"<{message['url']}|Open in raywatch>"
        if more:
            footer = f"and {more} more · {footer}"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": footer,
                                                        "verbatim": True}]})
        return {"text": _slack_escape(message["title"]), "blocks": blocks}


class Discord(Transport):
    kind, service = "discord", "Discord"
    COLORS = {"critical": 0xD93F0B, "warning": 0xF2A900, "info": 0x1F6FEB, "resolved": 0x2DA44E}

    def render(self, message: dict[str, Any]) -> dict[str, Any]:
        items, more = shown(message)
        content = (_markdown_escape(message["title"])
                   + (f" (and {more} more: {message['url']})" if more else ""))
        embeds = [{
            "title": f"{i['severity']} · {i['kind']}"[:256],
            "description": (f"{_markdown_escape(i['summary'][:400])}\n"
                            f"{_markdown_escape(where(i)[:200])} · {_since(i)}"),
            "url": i["url"],
            "color": self.COLORS["resolved" if i["state"] == "resolved" else i["severity"]],
            "timestamp": i["resolved_at"] or i["opened_at"],
        } for i in items]
        # No @everyone or role pings from text a trial wrote into its error message.
        return {"content": content[:2000], "embeds": embeds, "allowed_mentions": {"parse": []}}


class Teams(Transport):
    kind, service = "teams", "Teams"

    def render(self, message: dict[str, Any]) -> dict[str, Any]:
        items, more = shown(message)
        color = "Good" if message["status"] == "resolved" else "Attention"
        body: list[dict[str, Any]] = [{"type": "TextBlock",
                                       "text": _markdown_escape(message["title"]),
                                       "weight": "Bolder", "size": "Medium", "wrap": True,
                                       "color": color}]
        for i in items:
            body.append({"type": "TextBlock", "wrap": True, "separator": True,
                         "text": (f"**{i['severity']}** {i['kind']}: "
                                  f"{_markdown_escape(i['summary'][:500])}")})
            body.append({"type": "FactSet", "facts": [
                {"title": "Where", "value": _markdown_escape(where(i))},
                {"title": "When", "value": _since(i)}]})
        if more:
            body.append({"type": "TextBlock", "text": f"and {more} more", "wrap": True})
        card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard", "version": "1.4", "body": body,
                "actions": [{"type": "Action.OpenUrl", "title": "Open in raywatch",
                             "url": message["url"]}]}
        return {"type": "message", "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
            "content": card}]}


class Webhook(Transport):
    """The documented raywatch payload (docs/alerts.md, "Generic webhook payload"). With a
    secret, the request carries X-Raywatch-Timestamp and X-Raywatch-Signature:
    sha256=HMAC(secret, f"{timestamp}.{body}") in hex, so a receiver can check origin and
    freshness."""

    kind, service = "webhook", "the webhook"

    def render(self, message: dict[str, Any]) -> dict[str, Any]:
        return message

    def headers(self, body: bytes) -> dict[str, str]:
        if not self.secret:
            return {}
        timestamp = str(int(time.time()))
        return {"X-Raywatch-Timestamp": timestamp,
                "X-Raywatch-Signature": "sha256=" + sign(self.secret, timestamp, body)}


def sign(secret: str, timestamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


TRANSPORTS: dict[str, type[Transport]] = {t.kind: t for t in (Slack, Discord, Teams, Webhook)}
