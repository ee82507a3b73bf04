"""The webhook the server POSTs to when a background run ends (``RUN_MODE = "background"``), and
the signed links of notifications."""

from __future__ import annotations

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
from nitro_assistants.services.notifications import review_from_token
from nitro_assistants.services.runs import run_from_webhook_token


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
    expired. The screen itself asks for a login and checks permissions as always."""
    try:
        review_pk = review_from_token(token)
    except signing.SignatureExpired:
        return HttpResponseGone("This link has expired: open the review queue instead.")
    except signing.BadSignature:
        return HttpResponseBadRequest("This link is not valid.")
    return HttpResponseRedirect(reverse("admin:nitro_assistants_review_review", args=[review_pk]))
