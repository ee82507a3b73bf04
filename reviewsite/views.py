"""The demo's own pages: a landing page and the SMS outbox the demo assistant writes to."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render


def home(request: HttpRequest) -> HttpResponse:
    return redirect("admin:index")


@staff_member_required
def outbox(request: HttpRequest) -> HttpResponse:
    messages = []
    try:
        with open(settings.DEMO_OUTBOX, encoding="utf-8") as lines:
            for line in lines:
                try:
                    messages.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return render(request, "reviewsite/outbox.html", {"messages_sent": messages[::-1]})
