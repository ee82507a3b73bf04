"""Slack's interaction endpoint: the buttons of review cards and the reject modal POST here.

Thin: the request is checked (signature, timestamp window, replay) and handed to
:func:`nitro_assistants.services.slack.interaction`, which decides through ``services.decide``.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import parse_qs

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from nitro_assistants.services import slack

logger = logging.getLogger("nitro_assistants")


@csrf_exempt  # Slack signs its requests instead: checked before anything is read
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    body = request.body
    try:
        slack.verify_request(
            body,
            request.headers.get("X-Slack-Request-Timestamp"),
            request.headers.get("X-Slack-Signature"),
        )
    except slack.SlackRequestRefused as exc:
        logger.warning("Slack interaction refused: %s", exc)
        return HttpResponse(str(exc), status=exc.status, content_type="text/plain; charset=utf-8")
    try:
        payload = json.loads(parse_qs(body.decode())["payload"][0])
    except (UnicodeDecodeError, KeyError, IndexError, ValueError):
        return HttpResponse(
            "The body is not an interaction payload", status=400, content_type="text/plain"
        )
    if not isinstance(payload, dict):
        return HttpResponse("The payload is not an object", status=400, content_type="text/plain")
    answer = slack.interaction(payload)
    if answer is None:
        return HttpResponse(status=200)
    return JsonResponse(answer)
