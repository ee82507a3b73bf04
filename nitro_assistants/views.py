"""The webhook the server POSTs to when a background run ends (``RUN_MODE = "background"``), and
the signed links of notifications."""

from __future__ import annotations

import logging

from django.contrib.auth.views import redirect_to_login
from django.core import signing
from django.db import transaction
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseForbidden,
    HttpResponseGone,
    HttpResponseNotFound,
    HttpResponseRedirect,
)
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from nitro_assistants import tasks
from nitro_assistants.models import Run
from nitro_assistants.services.notifications import may_follow_link, read_link
from nitro_assistants.services.runs import run_from_webhook_token

logger = logging.getLogger("nitro_assistants")


@csrf_exempt
@require_POST
def webhook(request: HttpRequest) -> HttpResponse:
    """Authenticated by the signed token in its URL (``?token=``): the body is not trusted, it
    only tells us to go and read the run from the server."""
    try:
        run_pk = run_from_webhook_token(request.GET.get("token", ""))
    except (signing.BadSignature, ValueError):
        return HttpResponseForbidden("bad token")
    if not Run.objects.filter(pk=run_pk).exists():
        return HttpResponseNotFound("unknown run")
    transaction.on_commit(lambda: tasks.collect_run.delay(str(run_pk), wait=True))
    return HttpResponse(status=202)


@require_GET
def review_link(request: HttpRequest, token: str) -> HttpResponse:
    """A notification's link: to the review screen it names, if the signature holds and has not
    expired, and it was sent to whoever follows it. The screen itself asks for a login and
    checks permissions as always: a link never grants more than its follower holds.

    A link sent to a person is theirs: followed signed out, it asks for a login and comes back
    here (so the check runs on whoever signed in); followed by anybody else, it answers 403 and
    opens nothing. A link sent to a shared channel is bound to nobody (see
    :mod:`nitro_assistants.services.notifications`)."""
    try:
        review_pk, recipient = read_link(token)
    except signing.SignatureExpired:
        return HttpResponseGone("This link has expired: open the review queue instead.")
    except signing.BadSignature:
        return HttpResponseBadRequest("This link is not valid.")
    if recipient is not None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not may_follow_link(user, recipient):
            logger.warning(
                "User %s followed a link to review %s sent to user %s: refused",
                user.pk,
                review_pk,
                recipient,
            )
            return HttpResponseForbidden(
                "This link was sent to somebody else, and opens nothing for you. If you review "
                "this assistant's work, find the review in the review queue.",
                content_type="text/plain; charset=utf-8",
            )
    return HttpResponseRedirect(reverse("admin:nitro_assistants_review_review", args=[review_pk]))
