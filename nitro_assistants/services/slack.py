"""Deciding from Slack (docs/slack-and-email.md): a card per review, and the buttons on it.

A :class:`SlackNotifier` posts a Block Kit card for each review a channel should see: who it is
about, what is held, the rule and the approvals awaited, and buttons: approve, reject (with a
reason, typed in a modal), a question's options, and a link to the review screen. Every button
carries the revision and digest of what the card shows, signed by us (``SALT``), so a click
decides exactly what was seen: a card whose review changed since is answered "this changed",
shown anew, and nothing is applied.

A click reaches :func:`interaction` only through the view that checked Slack's signature, the
timestamp window and that the request was not seen before (:func:`verify_request`). The Slack
user speaks for the Django user an administrator linked to them (:class:`SlackUser`), else the
one active user whose e-mail address is the Slack user's verified one (``users.info``); the
decision then goes through :func:`nitro_assistants.services.decide` with ``via="slack"``: the
same permission, group and quorum checks as in the admin.

When a review ends anywhere (decided, superseded, dismissed), its cards are updated to say so,
by whom and where (:func:`close_cards`, from a Celery task that retries Slack's 429 and 5xx
answers after their ``Retry-After``). Nothing here holds up a review: Slack is told after the
review's transaction commits.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import time
import urllib.error
from collections.abc import Mapping
from typing import Any

from django.contrib.auth import get_user_model
from django.core import signing
from django.db import IntegrityError, transaction
from django.utils import timezone
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.signature import SignatureVerifier

from nitro_assistants import redacting, rules
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import (
    InteractionConflictError,
    NitroAssistantsError,
    ReviewNotPendingError,
)
from nitro_assistants.models import Approval, Decision, Review, SlackCard, SlackRequest, SlackUser
from nitro_assistants.services import previews
from nitro_assistants.services.decisions import decide
from nitro_assistants.services.enqueue import send
from nitro_assistants.services.notifications import review_link
from nitro_assistants.services.notifiers import Message, Notifier
from nitro_assistants.services.policy_enforcement import waiting_for

logger = logging.getLogger("nitro_assistants")

#: The salt of the signed values the cards' buttons carry.
SALT = "nitro_assistants.slack_card"
APPROVE = "nitro_approve"
REJECT = "nitro_reject"
ANSWER = "nitro_answer"
OPEN = "nitro_open"
#: The modal asking why a review is rejected (its ``callback_id``) and its text input's ids.
REJECT_VIEW = "nitro_reject_reason"
REASON = "reason"
#: What came of a click (:func:`_decide`).
RECORDED, REFUSED, SHOWN_ANEW = "recorded", "refused", "shown_anew"
#: Slack refuses a section's text over 3000 characters; what is held is cut well before.
MAX_SHOWN = 2500
#: Held calls a card shows (each a section; a message holds at most 50 blocks).
MAX_CALLS = 10


class SlackError(NitroAssistantsError):
    """Slack's Web API failed. ``transient`` for a 429, a 5xx or no connection; ``retry_after``
    is the seconds Slack asked us to wait (its ``Retry-After``), when it said."""

    def __init__(self, *args: object, transient: bool = False, retry_after: float | None = None):
        super().__init__(*args, transient=transient)
        self.retry_after = retry_after


class SlackRequestRefused(NitroAssistantsError):
    """A request to the interaction endpoint that is not Slack's, or not now: forged, stale,
    replayed or malformed. ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, *, status: int = 403):
        super().__init__(message)
        self.status = status


# -- the Web API -----------------------------------------------------------------------------------


def web_client() -> WebClient:
    conf = app_settings.SLACK
    return WebClient(
        token=str(conf["BOT_TOKEN"]),
        base_url=str(conf["API_URL"]),
        timeout=int(conf["TIMEOUT"]),
    )


def call(method: str, **arguments: Any) -> dict[str, Any]:
    """Call the Web API ``method`` (JSON body); its answer's data. Raises :class:`SlackError`
    (transient for 429, 5xx and connection errors, with Slack's ``Retry-After``)."""
    try:
        response = web_client().api_call(method, json=arguments)
    except SlackApiError as exc:
        status = int(getattr(exc.response, "status_code", 0) or 0)
        headers = getattr(exc.response, "headers", None) or {}
        retry_after = _seconds(headers.get("Retry-After") or headers.get("retry-after"))
        error = exc.response.get("error") if hasattr(exc.response, "get") else None
        raise SlackError(
            f"Slack's {method} answered {status}: {error or 'not ok'}",
            transient=status == 429 or status >= 500,
            retry_after=retry_after,
        ) from exc
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        raise SlackError(f"Slack's {method} could not be reached: {exc}", transient=True) from exc
    return dict(response.data) if isinstance(response.data, dict) else {}


def _seconds(value: Any) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if 0 <= seconds <= 3600 else None


# -- cards -----------------------------------------------------------------------------------------


def escape(text: Any) -> str:
    """Text for Slack's ``mrkdwn``: ``&``, ``<`` and ``>`` escaped, so what an assistant or a
    customer wrote cannot mention ``@channel`` or make a link of its own."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int = MAX_SHOWN) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)


def _code(value: Any) -> str:
    return "```" + escape(_cut(_text(value))).replace("```", "'''") + "```"


def shown_whole(review: Review) -> bool:
    """Whether the card shows everything the review holds (Slack limits a message's size): only
    then may it be approved from the card, since approving approves all of it."""
    if review.kind == Review.Kind.TOOL_CALLS:
        calls = review.tool_calls
        return len(calls) <= MAX_CALLS and all(
            len(_text(call.get("args") or {})) <= MAX_SHOWN for call in calls
        )
    if review.kind == Review.Kind.REPLY:
        return len(str((review.reply or {}).get("content") or "")) <= MAX_SHOWN
    return True


def button_value(review: Review, action: str, option: Any = None) -> str:
    """What a button carries: the review, the revision and digest the card shows, the action
    (and a question's option), signed (``SALT``)."""
    value = {"r": review.pk, "v": review.revision, "d": review.digest, "a": action}
    if option is not None:
        value["o"] = option
    return signing.dumps(value, salt=SALT, compress=True)


def read_value(value: Any) -> dict[str, Any]:
    """A button's value as :func:`button_value` signed it; ``signing.BadSignature`` if it is
    not one of ours. Cards do not expire: what they show is checked against the review."""
    data = signing.loads(str(value), salt=SALT)
    if not (
        isinstance(data, dict)
        and isinstance(data.get("r"), int)
        and isinstance(data.get("v"), int)
        and isinstance(data.get("d"), str)
        and isinstance(data.get("a"), str)
    ):
        raise signing.BadSignature("not a card's button")
    return data


def _open_button(review: Review) -> ButtonElement | None:
    """ "Open in admin": the signed link of a shared channel (bound to nobody: the review screen
    asks whoever follows it to sign in). Slack takes absolute URLs only: none without
    ``NOTIFY_BASE_URL``."""
    url = review_link(review.pk)
    if not url.startswith(("https://", "http://")):
        return None
    return ButtonElement(text="Open in admin", action_id=OPEN, url=url)


def _title(review: Review) -> str:
    if review.kind == Review.Kind.TOOL_CALLS:
        names = ", ".join(str(c.get("name")) for c in review.tool_calls) or "tool calls"
        return f"Review #{review.pk}: {names}"
    return f"Review #{review.pk}: {review.get_kind_display()}"


def _held(review: Review) -> list[str]:
    """What the review holds, as mrkdwn lines (each escaped)."""
    if review.kind == Review.Kind.TOOL_CALLS:
        return [
            f"*{escape(call.get('name'))}*\n{_code(call.get('args') or {})}"
            for call in review.tool_calls
        ]
    if review.kind == Review.Kind.REPLY:
        return [f"*Reply draft*\n>{escape(_cut(str((review.reply or {}).get('content') or '')))}"]
    question = _single_question(review)
    if question is not None:
        return [f"*{escape(_cut(str(question.get('prompt') or question.get('text') or '')))}*"]
    interaction = review.payload.get("interaction") or {}
    title = interaction.get("title") or interaction.get("summary") or review.get_kind_display()
    return [f"*{escape(_cut(str(title)))}*\nOpen it in the admin to decide."]


def _single_question(review: Review) -> dict[str, Any] | None:
    """The question of a question review with exactly one question, answered by one option:
    its options become buttons. None for any other review."""
    if review.kind != Review.Kind.QUESTION:
        return None
    questions = (review.payload.get("interaction") or {}).get("questions")
    if not isinstance(questions, list) or len(questions) != 1:
        return None
    question = questions[0]
    if not isinstance(question, dict) or (question.get("input") or "single_select") not in (
        "single_select",
    ):
        return None
    options = question.get("options")
    if not isinstance(options, list) or not 0 < len(options) <= 10:
        return None
    return question


def _who(review: Review) -> str:
    thread = review.thread
    return escape(thread.subject or f"thread {thread.thread_id}")


def card(review: Review) -> list[dict[str, Any]]:
    """The Block Kit blocks of a pending review's card, its buttons bound to what it shows
    (redacted: REDACT; a card that hides a value offers no Approve)."""
    redacted = redacting.hidden_paths(review)
    # A part a rule says an approval needs shown, collapsed or redacted: a card cannot show it.
    unshowable = any(part.collapsed or part.redacted for part in previews.required_parts(review))
    review = redacting.shown_review(review)
    blocks: list[Block] = [HeaderBlock(text=_cut(_title(review), 150))]
    blocks.append(
        SectionBlock(
            text=MarkdownTextObject(
                text=f"*{escape(review.thread.assistant_key)}* · {_who(review)}"
            )
        )
    )
    for line in _held(review)[:MAX_CALLS]:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=line)))
    progress = waiting_for(review)
    if progress:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=escape(progress))]))
    buttons: list[ButtonElement] = []
    whole = shown_whole(review) and not redacted and not unshowable
    if redacted:
        hidden = "Some values are redacted here: open it in the admin to approve it."
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=hidden)]))
    elif unshowable:
        needed = "A part it must show to be approved is too long for a card: open it in the admin."
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=needed)]))
    elif not whole:
        too_long = "Too long to show whole here: open it in the admin to approve it."
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=too_long)]))
    if review.kind in (Review.Kind.TOOL_CALLS, Review.Kind.REPLY):
        if whole:
            buttons.append(
                ButtonElement(
                    text="Approve",
                    action_id=APPROVE,
                    value=button_value(review, "approve"),
                    style="primary",
                )
            )
        buttons.append(
            ButtonElement(
                text="Reject…",
                action_id=REJECT,
                value=button_value(review, "reject"),
                style="danger",
            )
        )
    question = _single_question(review)
    if question is not None:
        for index, option in enumerate(question.get("options") or []):
            if not isinstance(option, dict) or "optionId" not in option:
                continue
            label = str(option.get("label") or option.get("optionId"))
            buttons.append(
                ButtonElement(
                    text=_cut(label, 75),
                    action_id=f"{ANSWER}_{index}",
                    value=button_value(review, "answer", str(option["optionId"])),
                )
            )
    opener = _open_button(review)
    if opener is not None:
        buttons.append(opener)
    blocks.append(ActionsBlock(block_id=f"nitro_review_{review.pk}", elements=buttons[:25]))
    blocks.append(
        ContextBlock(
            elements=[MarkdownTextObject(text=f"Review #{review.pk} · revision {review.revision}")]
        )
    )
    return [block.to_dict() for block in blocks]


def ending(review: Review) -> str:
    """How ``review`` ended, who and where: "Approved by jane in Slack"."""
    if review.status == Review.Status.EXPIRED:
        return "Expired: nobody answered in time; the assistant was told so"
    try:
        decision: Decision | None = review.decision
    except Decision.DoesNotExist:
        decision = None
    if decision is not None:
        verb = _verb(decision.actions)
        where = Decision.Channel(decision.channel).label if decision.channel else "code"
        who = decision.reviewer_id
        if decision.decided_by is not None:
            who = decision.decided_by.get_full_name() or decision.decided_by.get_username()
        note = decision.note and redacting.shown_text(decision.note)
        note = f": {note}" if note and verb == "Rejected" else ""
        return f"{verb} by {who} ({where}){note}"
    if review.status == Review.Status.DISMISSED:
        return "Dismissed: the conversation was ended without an answer"
    if review.status == Review.Status.SUPERSEDED:
        return "Superseded: the conversation moved on, nothing was applied"
    if review.status == Review.Status.FAILED:
        return "Failed: the assistant could not be given an answer; see the review in the admin"
    return f"{review.get_status_display().capitalize()}"


def _verb(actions: list[str]) -> str:
    if actions and all(a == "reject" for a in actions):
        return "Rejected"
    if any(a == "edit" for a in actions):
        return "Edited and approved"
    if actions and all(a in ("approve", "accept") for a in actions):
        return "Approved"
    return "Decided"


def ended_card(review: Review) -> list[dict[str, Any]]:
    """The card of a review that ended: what it held, how it ended; no buttons but the link."""
    review = redacting.shown_review(review)
    blocks: list[Block] = [HeaderBlock(text=_cut(_title(review), 150))]
    for line in _held(review)[:MAX_CALLS]:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=line)))
    blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*{escape(_cut(ending(review)))}*")))
    opener = _open_button(review)
    if opener is not None:
        blocks.append(ActionsBlock(block_id=f"nitro_review_{review.pk}", elements=[opener]))
    return [block.to_dict() for block in blocks]


# -- the notifier ----------------------------------------------------------------------------------


class SlackNotifier(Notifier):
    """Review cards in Slack: one per review, posted with ``chat.postMessage`` and updated with
    ``chat.update`` when told again of the same review (escalated, overdue) and when it ends.
    Credentials come from the ``SLACK`` setting. ``OPTIONS``:

    - ``{"channel": "C0123…"}``: in one channel, for the team (its ID, or its name);
    - ``{"to": "reviewers"}``: in each reviewer's direct messages with the app, found by their
      link (:class:`SlackUser`) or their e-mail address (``users.lookupByEmail``); a reviewer
      Slack does not know is skipped.

    Other notifications (a failed delivery) are a line of text."""

    def __init__(self, name: str, **options: Any) -> None:
        super().__init__(name, **options)
        to = options.get("to", "channel")
        if to not in ("channel", "reviewers"):
            raise NitroAssistantsError(
                f"Notifier {name!r}: a SlackNotifier's `to` is 'channel' or 'reviewers'"
            )
        if to == "channel" and not options.get("channel"):
            raise NitroAssistantsError(f"Notifier {name!r}: a SlackNotifier needs a `channel`")
        self.per_user = to == "reviewers"

    def send(self, message: Message) -> None:
        target = str(self.options.get("channel") or "")
        if self.per_user:
            target = slack_id_of(message.recipient)
            if not target:
                return
        for item in message.items:
            review = getattr(item, "review", None)
            if review is None:
                call("chat.postMessage", channel=target, text=f"{item.title}: {item.text}")
                continue
            post_card(self.name, target, review, item.text)


def slack_id_of(user: Any) -> str:
    """The Slack user ID of a Django user: their link, else the Slack user with their e-mail
    address (``users.lookupByEmail``); blank when Slack knows none."""
    if user is None:
        return ""
    linked = SlackUser.objects.filter(user_id=user.pk).values_list("slack_user_id", flat=True)
    for slack_id in linked[:1]:
        return str(slack_id)
    email = str(getattr(user, "email", "") or "")
    if not email:
        return ""
    try:
        found = call("users.lookupByEmail", email=email).get("user") or {}
    except SlackError as exc:
        if exc.transient:
            raise
        return ""  # users_not_found
    return str(found.get("id") or "") if not found.get("deleted") else ""


def post_card(notifier: str, target: str, review: Review, text: str = "") -> SlackCard | None:
    """Post the card of ``review`` to ``target`` (a channel, or a Slack user's direct messages),
    or update the one already there; None when the review ended before it could be posted
    (nothing to decide)."""
    review = Review.objects.select_related("thread", "decision").get(pk=review.pk)
    existing = SlackCard.objects.filter(
        review=review, notifier=notifier, target=target, closed_at__isnull=True
    ).first()
    if review.status != Review.Status.PENDING:
        return None
    fallback = f"{_title(review)} {text}".strip()
    blocks = card(review)
    if existing is not None:
        call("chat.update", channel=existing.channel, ts=existing.ts, text=fallback, blocks=blocks)
        SlackCard.objects.filter(pk=existing.pk).update(
            revision=review.revision, digest=review.digest
        )
        return existing
    posted = call("chat.postMessage", channel=target, text=fallback, blocks=blocks)
    return SlackCard.objects.create(
        review=review,
        notifier=notifier,
        target=target,
        channel=str(posted.get("channel") or target),
        ts=str(posted["ts"]),
        revision=review.revision,
        digest=review.digest,
    )


#: The task that updates the cards of a review that ended (:func:`close_cards`).
CLOSE_TASK = "nitro_assistants.close_slack_cards"


def review_ended(review: Review) -> None:
    """A review ended (decided, superseded, dismissed: its signal was sent after commit): its
    open cards are updated by a task. Never raises: Slack never holds up a review."""
    try:
        if SlackCard.objects.filter(review_id=review.pk, closed_at__isnull=True).exists():
            send(CLOSE_TASK, review.pk)
    except Exception:  # the broker is down: the card stays as it was, which a click corrects
        logger.exception("Could not enqueue the update of review %s's Slack cards", review.pk)


def close_cards(review_pk: int) -> int:
    """Update every open card of a review that ended to say how, and by whom (``chat.update``).
    Returns the cards updated. Raises a transient :class:`SlackError` (the task retries after
    Slack's ``Retry-After``); a card Slack no longer has is closed and logged."""
    review = Review.objects.select_related("thread", "decision__decided_by").get(pk=review_pk)
    if review.status == Review.Status.PENDING:  # nothing ended: a later signal closes them
        return 0
    blocks = ended_card(review)
    text = f"{_title(review)}: {ending(review)}"
    updated = 0
    for slack_card in SlackCard.objects.filter(review=review, closed_at__isnull=True):
        try:
            call(
                "chat.update",
                channel=slack_card.channel,
                ts=slack_card.ts,
                text=text,
                blocks=blocks,
            )
        except SlackError as exc:
            if exc.transient:
                raise
            logger.warning(
                "Slack card %s of review %s not updated: %s", slack_card.pk, review_pk, exc
            )
        SlackCard.objects.filter(pk=slack_card.pk).update(closed_at=timezone.now())
        updated += 1
    return updated


# -- requests from Slack ---------------------------------------------------------------------------


def verify_request(body: bytes, timestamp: str | None, signature: str | None) -> None:
    """Check a request to the interaction endpoint: Slack's signature over its body with the
    signing secret (``slack_sdk``'s :class:`SignatureVerifier`), a timestamp within
    ``REQUEST_MAX_AGE`` of now, and a signature not seen before (remembered for as long as its
    timestamp is accepted). Raises :class:`SlackRequestRefused`, saying which."""
    conf = app_settings.SLACK
    secret = str(conf["SIGNING_SECRET"] or "")
    if not secret:
        raise SlackRequestRefused("Slack is not configured here", status=404)
    if not timestamp or not signature:
        raise SlackRequestRefused("The request is not signed by Slack", status=401)
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise SlackRequestRefused("The request's timestamp is not a number", status=400)
    max_age = min(int(conf["REQUEST_MAX_AGE"]), 300)  # slack_sdk's window is five minutes
    if abs(time.time() - int(timestamp)) > max_age:
        raise SlackRequestRefused("The request is too old (or from the future): refused")
    if not SignatureVerifier(secret).is_valid(body, timestamp, signature):
        raise SlackRequestRefused("The request's signature is not Slack's: refused", status=401)
    key = hashlib.sha256(f"{timestamp}:{signature}".encode()).hexdigest()
    now = timezone.now()
    SlackRequest.objects.filter(at__lt=now - datetime.timedelta(seconds=2 * max_age)).delete()
    try:
        with transaction.atomic():
            SlackRequest.objects.create(key=key, at=now)
    except IntegrityError:
        raise SlackRequestRefused("This request was already handled: a replay is refused") from None


def person(slack_user: Mapping[str, Any]) -> tuple[Any, str]:
    """The Django user a Slack user speaks for, and ``""``; or ``None`` and why not. An
    explicit link (:class:`SlackUser`) first, else the one active user with the Slack user's
    verified e-mail address."""
    slack_id = str(slack_user.get("id") or "")
    team = str(app_settings.SLACK["TEAM_ID"] or "")
    if team and str(slack_user.get("team_id") or "") not in ("", team):
        return None, "You are in another Slack workspace than this app's: nothing was applied."
    linked = SlackUser.objects.filter(slack_user_id=slack_id).select_related("user").first()
    if linked is not None:
        if not linked.user.is_active:
            return None, "The reviewer linked to your Slack account is not active here."
        return linked.user, ""
    unknown = (
        "Your Slack account is not linked to a reviewer here (no explicit link, and no active "
        "user with your verified e-mail address). Ask an administrator to add you under "
        "Slack users; nothing was applied."
    )
    try:
        info = call("users.info", user=slack_id).get("user") or {}
    except SlackError as exc:
        if not exc.transient:  # user_not_found, or the app may not read users' e-mail
            logger.warning("users.info for %s: %s", slack_id, exc)
            return None, unknown
        return None, "Slack did not tell who you are just now; try again. Nothing was applied."
    if team and str(info.get("team_id") or "") != team:
        return None, "You are in another Slack workspace than this app's: nothing was applied."
    email = str((info.get("profile") or {}).get("email") or "")
    if info.get("deleted") or info.get("is_bot") or not info.get("is_email_confirmed") or not email:
        return None, unknown
    users = list(get_user_model().objects.filter(email__iexact=email, is_active=True)[:2])
    if len(users) != 1:
        return None, unknown
    return users[0], ""


def interaction(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """Handle a verified interaction ``payload``: a button on a card (``block_actions``) or the
    reject modal submitted (``view_submission``). Returns the JSON to answer Slack with (None:
    an empty 200). Refusals are said to the person who clicked (an ephemeral message, or an
    error under the modal's field); nothing is applied then."""
    kind = payload.get("type")
    if kind == "block_actions":
        actions = payload.get("actions")
        if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
            return None
        return _button(payload, actions[0])
    if kind == "view_submission":
        view = _part(payload, "view")
        if view.get("callback_id") == REJECT_VIEW:
            return _reject_submitted(payload, view)
    return None


def _part(payload: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``payload[key]`` when it is an object, else an empty one: a payload of another shape than
    Slack's is answered as one that asks nothing, never with an error."""
    value = payload.get(key)
    return value if isinstance(value, Mapping) else {}


def _say(payload: Mapping[str, Any], text: str, blocks: list[dict[str, Any]] | None = None) -> None:
    """Tell the person who clicked, and only them (``chat.postEphemeral``); never raises."""
    channel = _part(payload, "channel").get("id") or _part(payload, "container").get("channel_id")
    user = _part(payload, "user").get("id")
    if not channel or not user:
        return
    arguments: dict[str, Any] = {"channel": channel, "user": user, "text": text}
    if blocks:
        arguments["blocks"] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": escape(text)}},
            *blocks,
        ]
    try:
        call("chat.postEphemeral", **arguments)
    except SlackError as exc:
        logger.warning("Could not tell Slack user %s: %s (%s)", user, text, exc)


def _button(payload: Mapping[str, Any], action: Mapping[str, Any]) -> dict[str, Any] | None:
    action_id = str(action.get("action_id") or "")
    if action_id == OPEN:
        return None  # a link: Slack opened it
    try:
        value = read_value(action.get("value"))
    except signing.BadSignature:
        _say(payload, "This button is not one this app made: nothing was applied.")
        return None
    user, why = person(_part(payload, "user"))
    if user is None:
        _say(payload, why)
        return None
    if value["a"] == "reject":
        _open_reject(payload, user, value, action)
        return None
    if value["a"] == "approve":
        review = Review.objects.filter(pk=value["r"]).first()
        if review is None:
            _say(payload, f"Review #{value['r']} no longer exists: nothing was applied.")
            return None
        if redacting.hidden_paths(review):
            # The card showed it redacted: approving it would approve what was not shown.
            _say(
                payload,
                f"Review #{review.pk} holds values the card could not show: open it in the "
                "admin to approve it. Nothing was applied.",
            )
            return None
        body = {**rules.approve_everything(review.kind, review.tool_calls), "note": ""}
    elif value["a"] == "answer":
        review = Review.objects.filter(pk=value["r"]).first()
        question = _single_question(review) if review is not None else None
        if review is None or question is None:
            _say(payload, f"Review #{value['r']} no longer asks this: nothing was applied.")
            return None
        body = {
            "decision": "answer",
            "answers": [{"questionId": str(question.get("questionId")), "optionIds": [value["o"]]}],
        }
    else:
        _say(payload, "This button does nothing here: nothing was applied.")
        return None
    text, outcome = _decide(payload, user, value, body)
    if outcome != SHOWN_ANEW:
        _say(payload, text)
    return None


def _decide(
    payload: Mapping[str, Any], user: Any, value: Mapping[str, Any], body: Mapping[str, Any]
) -> tuple[str, str]:
    """Decide through ``services.decide`` on what the card showed. Returns what to tell the
    person and what came of it: ``RECORDED``, ``REFUSED``, or ``SHOWN_ANEW`` (the review changed
    or ended: :func:`_changed` told the person already, with the review as it is)."""
    stamped = {**body, "revision": value["v"], "digest": value["d"]}
    try:
        recorded = decide(value["r"], user, stamped, via="slack")
    except Review.DoesNotExist:
        return f"Review #{value['r']} no longer exists: nothing was applied.", REFUSED
    except (InteractionConflictError, ReviewNotPendingError):
        return _changed(payload, value), SHOWN_ANEW
    except NitroAssistantsError as exc:  # not allowed, not in the group, does not fit
        return f"{exc} Nothing was applied.", REFUSED
    if isinstance(recorded, Approval):
        review = Review.objects.select_related("thread", "handling__group").get(pk=value["r"])
        progress = waiting_for(review)
        refresh_cards(review)  # the card shows the approvals counted
        return f"Your approval of review #{value['r']} is recorded ({progress}).", RECORDED
    return f"Recorded: review #{value['r']} {_verb(recorded.actions).lower()}.", RECORDED


def _changed(payload: Mapping[str, Any], value: Mapping[str, Any]) -> str:
    """The review is not what the card showed: say so, with the review as it is now (the card
    is updated to it, or closed if it ended)."""
    review = Review.objects.select_related("thread", "decision__decided_by").get(pk=value["r"])
    if review.status != Review.Status.PENDING:
        text = f"Review #{review.pk} already ended: {ending(review)}. Nothing was applied."
        _say(payload, text)
        return text
    text = (
        f"Review #{review.pk} changed since this card showed it (revision {value['v']}, now "
        f"{review.revision}): nothing was applied. Here is the new version; decide on it."
    )
    blocks = card(review)
    _say(payload, text, blocks)
    refresh_cards(review, blocks)
    return text


def refresh_cards(review: Review, blocks: list[dict[str, Any]] | None = None) -> None:
    """Show a pending review as it is now on its open cards (its new revision, the approvals
    counted); a card Slack does not update now is left as it was (a click on it is answered
    with the new version). Never raises."""
    blocks = blocks if blocks is not None else card(review)
    for slack_card in SlackCard.objects.filter(review=review, closed_at__isnull=True):
        try:
            call(
                "chat.update",
                channel=slack_card.channel,
                ts=slack_card.ts,
                text=_title(review),
                blocks=blocks,
            )
        except SlackError as exc:
            logger.warning("Slack card %s not refreshed: %s", slack_card.pk, exc)
            continue
        SlackCard.objects.filter(pk=slack_card.pk).update(
            revision=review.revision, digest=review.digest
        )


def _reject_view(value_token: str, review_pk: int, channel: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": REJECT_VIEW,
        "private_metadata": json.dumps({"value": value_token, "channel": channel}),
        "title": {"type": "plain_text", "text": "Reject"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "input",
                "block_id": REASON,
                "label": {"type": "plain_text", "text": f"Why reject review #{review_pk}?"},
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON,
                    "multiline": True,
                    "max_length": rules.MAX_NOTE,
                },
            }
        ],
    }


def _open_reject(
    payload: Mapping[str, Any], user: Any, value: Mapping[str, Any], action: Mapping[str, Any]
) -> None:
    """The reject button: the reason is asked in a modal (``views.open``), once the review is
    still what the card shows and the person may decide it."""
    review = Review.objects.select_related("thread").filter(pk=value["r"]).first()
    if review is None:
        _say(payload, f"Review #{value['r']} no longer exists: nothing was applied.")
        return
    if review.status != Review.Status.PENDING or (review.revision, review.digest) != (
        value["v"],
        value["d"],
    ):
        _changed(payload, value)
        return
    channel = str(_part(payload, "channel").get("id") or "")
    try:
        call(
            "views.open",
            trigger_id=str(payload.get("trigger_id") or ""),
            view=_reject_view(str(action.get("value")), review.pk, channel),
        )
    except SlackError as exc:
        logger.warning("views.open for review %s failed: %s", review.pk, exc)
        _say(payload, "Slack did not open the form just now; try again. Nothing was applied.")


def _reject_submitted(payload: Mapping[str, Any], view: Mapping[str, Any]) -> dict[str, Any] | None:
    def error(text: str) -> dict[str, Any]:
        return {"response_action": "errors", "errors": {REASON: text[:2000]}}

    try:
        metadata = json.loads(str(view.get("private_metadata") or ""))
        value = read_value(metadata.get("value"))
    except (ValueError, AttributeError, signing.BadSignature):
        return error("This form is not one this app made: nothing was applied.")
    state = _part(_part(_part(view, "state"), "values"), REASON)
    reason = str(_part(state, REASON).get("value") or "").strip()
    if not reason:
        return error("Say why it is rejected: the assistant is told.")
    user, why = person(_part(payload, "user"))
    if user is None:
        return error(why)
    review = Review.objects.filter(pk=value["r"]).first()
    if review is None:
        return error(f"Review #{value['r']} no longer exists: nothing was applied.")
    try:
        body = rules.reject_everything(review.kind, review.tool_calls, reason[: rules.MAX_NOTE])
    except NitroAssistantsError as exc:
        return error(str(exc))
    card_payload = {**payload, "channel": {"id": str(metadata.get("channel") or "")}}
    text, outcome = _decide(card_payload, user, value, body)
    if outcome == RECORDED:
        _say(card_payload, text)
        return None
    return error(text)


__all__ = [
    "SlackError",
    "SlackNotifier",
    "SlackRequestRefused",
    "button_value",
    "call",
    "card",
    "close_cards",
    "ended_card",
    "interaction",
    "person",
    "post_card",
    "read_value",
    "refresh_cards",
    "review_ended",
    "slack_id_of",
    "verify_request",
]
