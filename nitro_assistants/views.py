"""The webhook the server POSTs to when a background run ends (``RUN_MODE = "background"``)."""

from __future__ import annotations

from django.core import signing
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from nitro_assistants import tasks
from nitro_assistants.models import Run
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
