"""The demo's own pages: a landing page and the SMS outbox the demo assistant writes to."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from reviewsite import outbox as sms


def home(request: HttpRequest) -> HttpResponse:
    return redirect("admin:index")


@staff_member_required
def outbox(request: HttpRequest) -> HttpResponse:
    context = {**admin.site.each_context(request), "title": "SMS outbox"}
    return render(request, "reviewsite/outbox.html", {**context, "messages_sent": sms.sent()[::-1]})
