"""What a notification says on each channel. A reminder, a daily plan, a test and an
address's verification code are kinds; each says how it reads as a push payload, a mail
and an ntfy post (None: it has nothing for that channel), and one sender sends them all."""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from email.message import EmailMessage
from email.utils import formataddr, make_msgid
from functools import partial
from html import escape
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

# A push message's plaintext must stay under 4 KB once encrypted (RFC 8291: 4096 bytes
# with 103 of header and padding): long titles are cut to keep it there.
MAX_PUSH_BYTES = 3800


@dataclass(frozen=True, slots=True)
class Link:
    action: str  # done, snooze
    title: str
    token: str


@dataclass(frozen=True, slots=True)
class Rendered:
    """A notification on one channel: the push JSON; the mail (made when asked for: a
    MIME message costs more to build than a push costs to send); ntfy's body and headers;
    the push Topic (a later message with the same one replaces an earlier one)."""

    push: dict[str, Any] | None = None
    mail: Callable[[], EmailMessage] | None = None
    ntfy: tuple[str, dict[str, str]] | None = None
    topic: str | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """What every rendering needs: where the page is, who sends mail, one-click links."""

    base_url: str
    mail_from: str
    unsubscribe_url: str | None = None
    links: list[Link] = field(default_factory=list)


def action_url(base_url: str, token: str) -> str:
    return f"{base_url}/notifications/actions?token={quote(token)}"


def reminder(task: dict[str, Any], tz: ZoneInfo, context: Context) -> Rendered:
    title = str(task.get("title") or "A task")
    number = task.get("number")
    when = _local(task.get("due_at"), tz)
    body = f"Due {when}" if when else "Reminder"
    url = f"{context.base_url}/?task={task.get('id')}"
    shown = {
        "id": task.get("id"),
        "number": number,
        "title": title,
        "due_at": task.get("due_at"),
    }
    push: dict[str, Any] = {
        "type": "reminder.due",
        "title": title,
        "body": body,
        "task": shown,
        "url": url,
        "actions": [
            {"action": link.action, "title": link.title, "token": link.token}
            for link in context.links
        ],
    }
    while len(json.dumps(push).encode()) > MAX_PUSH_BYTES and len(push["title"]) > 20:
        push["title"] = push["task"]["title"] = push["title"][: len(push["title"]) // 2] + "…"
    label = f"#{number} {title}" if number is not None else title
    lines = [f"Reminder: {label}", body]
    mail = partial(_mail, context, subject=f"Reminder: {title}", lines=lines, url=url)
    ntfy_headers = {
        "Title": _header(f"Reminder: {title}"),
        "Priority": "high",
        "Tags": "alarm_clock",
        "Click": url,
    }
    if context.links:
        ntfy_headers["Actions"] = "; ".join(
            f"http, {link.title}, {context.base_url}/notifications/actions, method=POST,"
            " headers.Content-Type=application/json,"
            f" body='{json.dumps({'token': link.token})}', clear=true"
            for link in context.links
        )
    topic = str(task.get("id", "")).replace("-", "")[:32] or None
    return Rendered(push=push, mail=mail, ntfy=(f"{label}\n{body}", ntfy_headers), topic=topic)


def digest(lines: list[str], context: Context) -> Rendered:
    body = "\n".join(lines)
    push = {"type": "digest", "title": "Today's plan", "body": body, "url": context.base_url}
    while len(json.dumps(push).encode()) > MAX_PUSH_BYTES:
        push["body"] = push["body"][: len(push["body"]) // 2] + "…"
    mail = partial(_mail, context, subject="Today's plan", lines=lines, url=context.base_url)
    headers = {"Title": "Today's plan", "Tags": "spiral_calendar", "Click": context.base_url}
    return Rendered(push=push, mail=mail, ntfy=(body, headers), topic="daily-plan")


def test(context: Context) -> Rendered:
    text = "Notifications from todo-agent reach you here."
    push = {"type": "test", "title": "Test notification", "body": text, "url": context.base_url}
    mail = partial(_mail, context, subject="Test notification", lines=[text], url=context.base_url)
    headers = {"Title": "Test notification", "Tags": "bell", "Click": context.base_url}
    return Rendered(push=push, mail=mail, ntfy=(text, headers), topic="test")


def verification(code: str, context: Context) -> Rendered:
    lines = [
        f"Your code: {code}",
        "Type it in todo-agent's settings to have reminders mailed to this address.",
        "It works for one hour. If you did not ask for it, ignore this mail.",
    ]
    return Rendered(
        mail=partial(_mail, context, subject=f"Your code: {code}", lines=lines, url=None)
    )


def _mail(context: Context, *, subject: str, lines: list[str], url: str | None) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = subject.replace("\r", " ").replace("\n", " ")[:200]
    message["From"] = context.mail_from
    message["Message-ID"] = make_msgid(domain="todo-agent")
    text = list(lines)
    html = [f"<p>{escape(line)}</p>" for line in lines]
    for link in context.links:
        target = action_url(context.base_url, link.token)
        text.append(f"{link.title}: {target}")
        html.append(f'<p><a href="{escape(target)}">{escape(link.title)}</a></p>')
    if url:
        text.append(f"Open: {url}")
        html.append(f'<p><a href="{escape(url)}">Open todo-agent</a></p>')
    if context.unsubscribe_url:
        message["List-Unsubscribe"] = f"<{context.unsubscribe_url}>"
        message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
        text.append(f"Stop these mails: {context.unsubscribe_url}")
        html.append(
            f'<p><small><a href="{escape(context.unsubscribe_url)}">Stop these mails</a>'
            "</small></p>"
        )
    message.set_content("\n\n".join(text) + "\n")
    message.add_alternative(
        "<!doctype html><html><body>" + "".join(html) + "</body></html>", subtype="html"
    )
    return message


def addressed(message: EmailMessage, to: str) -> EmailMessage:
    message["To"] = formataddr(("", to))
    return message


def _local(value: Any, tz: ZoneInfo) -> str | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment.astimezone(tz).strftime("%a %d %b %H:%M")


def _header(value: str) -> str:
    """A header value ntfy reads: ASCII as it is, else RFC 2047 (which ntfy decodes)."""
    from email.header import Header

    flat = value.replace("\r", " ").replace("\n", " ")
    try:
        flat.encode("ascii")
        return flat
    except UnicodeEncodeError:
        return Header(flat, "utf-8").encode()
