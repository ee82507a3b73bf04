"""The demo's own pages: a landing page and the SMS outbox the demo assistant writes to."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from reviewsite import outbox as sms


def home(request: HttpRequest) -> HttpResponse:
    return redirect("admin:index")


@staff_member_required
def outbox(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "SMS outbox"}
    messages = [{**message, "sent_at": sent_at(message)} for message in sms.sent()[::-1]]
    return render(request, "reviewsite/outbox.html", {**context, "messages_sent": messages})


def sent_at(message: dict[str, Any]) -> datetime.datetime | None:
    """When a message was sent, to be shown as the admin shows a time (in the site's time zone,
    to the minute), not as the raw ISO string with microseconds the outbox stores; None when
    ``at`` is no time."""
    try:
        at = datetime.datetime.fromisoformat(str(message.get("at") or ""))
    except ValueError:
        return None
    return timezone.localtime(at) if timezone.is_aware(at) else at
