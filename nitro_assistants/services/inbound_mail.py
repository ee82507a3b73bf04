"""Deciding by replying to a notification e-mail (docs/slack-and-email.md).

django-anymail turns each ESP's inbound webhook (Mailgun, Postmark, SES, SendGrid…) into one
``anymail.signals.inbound`` signal with an ``AnymailInboundMessage``; :func:`receive` handles it.
A reply is applied only when every check holds, in this order, and else refused with nothing
applied:

1. not an automatic message (``Auto-Submitted``, ``Precedence: bulk``…): ignored, so two robots
   never answer each other;
2. the ESP's verdict: not flagged as spam, a spam score up to ``MAX_SPAM_SCORE``, and the
   receiving server's ``Authentication-Results`` (the topmost, the one it added) without a
   failed DMARC, SPF or DKIM check: refused without an answer (an answer to a forged sender is
   backscatter);
3. a recipient address carrying the token of the notification it answers
   (:mod:`.reply_tokens`), unexpired and signed by us;
4. sent from the address of the user the notification went to (an active user);
5. the review still what the notification showed (its revision and digest): else the answer is
   the new version, with a token to reply to;
6. one command on the first line of what was written (quoted text and signatures left out):
   ``approve``, ``reject: <reason>``, or a question's option;
7. :func:`nitro_assistants.services.decide` with ``via="email"``: the same permission, group
   and quorum checks as the admin.

Every refusal from step 3 on is answered (to the sender, saying why); a decision is confirmed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from html import unescape
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.utils.html import strip_tags

from nitro_assistants import redacting, rules
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InvalidArgumentError,
    NitroAssistantsError,
    ReviewNotPendingError,
)
from nitro_assistants.models import Approval, Review
from nitro_assistants.services import reply_tokens
from nitro_assistants.services.decisions import decide
from nitro_assistants.services.notifiers import held_text
from nitro_assistants.services.policy_enforcement import waiting_for

logger = logging.getLogger("nitro_assistants")

#: What came of an inbound message (:func:`receive`'s result, for logs and tests).
IGNORED, SUSPICIOUS, REFUSED, CHANGED, RECORDED = (
    "ignored",
    "suspicious",
    "refused",
    "changed",
    "recorded",
)

#: Where the text quoted from the notification starts, in the common mail programs' words.
_QUOTE_STARTS = re.compile(
    r"^\s*("
    r"on\s.+wrote:\s*$|"  # Gmail, Apple Mail, Thunderbird
    r"-+\s*original message\s*-+|"  # Outlook
    r"_{5,}\s*$|"
    r"from:\s.+|"  # Outlook's header block
    r"sent from my\s.+|"
    r"get outlook for\s.+"
    r")",
    re.IGNORECASE,
)
_REJECT = re.compile(r"^reject\s*[:\-–—]\s*(?P<reason>.+)$", re.IGNORECASE)
_APPROVE = re.compile(r"^(approve|approved|yes)[.!]?$", re.IGNORECASE)
_AUTH_FAILED = re.compile(r"\b(dmarc|spf|dkim)=(fail|softfail|permerror)\b", re.IGNORECASE)

HELP = (
    'Reply with one line, above the quoted e-mail: "approve", or "reject: <why>" (the '
    "assistant is told why){options}."
)


def command_of(text: str) -> str:
    """What a reply says above what the mail program quoted (lines starting ``>``, "On …
    wrote:", Outlook's "Original Message") and the signature (after ``-- ``), up to its first
    blank line. Its first line is the command."""
    lines: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.rstrip() in ("--", "-- ") or line.startswith(">") or _QUOTE_STARTS.match(line):
            break
        lines.append(line.strip())
    written = "\n".join(lines).strip()
    return re.sub(r"\n{2,}.*\Z", "", written, flags=re.DOTALL).strip()


#: Characters of a reply read for its command (which is on its first lines).
MAX_READ = 20_000
_QUOTED_HTML = re.compile(
    r"<blockquote\b.*?</blockquote>|<div[^>]*class=\"?(gmail_quote|moz-cite-prefix)[^>]*>.*\Z",
    re.IGNORECASE | re.DOTALL,
)
_LINE_BREAKS = re.compile(r"<br\s*/?>|</p>|</div>|</li>", re.IGNORECASE)


def html_text(html: str) -> str:
    """The text of an HTML-only reply, its quoted part (``<blockquote>``, Gmail's and
    Thunderbird's quote blocks) left out, one line per paragraph."""
    # The command is at the top: what follows is not read (nor scanned by the patterns).
    text = _LINE_BREAKS.sub("\n", _QUOTED_HTML.sub("", html[:MAX_READ]))
    return unescape(strip_tags(text))


def _automatic(message: Any) -> bool:
    submitted = str(message.get("Auto-Submitted") or "no").strip().lower()
    precedence = str(message.get("Precedence") or "").strip().lower()
    return (
        submitted != "no"
        or precedence in ("bulk", "junk", "list", "auto_reply")
        or message.get("X-Autoreply") is not None
        or message.get("X-Autorespond") is not None
    )


def _suspicious(message: Any) -> str:
    """Why the ESP's verdict refuses the message; blank when it does not."""
    if getattr(message, "spam_detected", None):
        return "the ESP flagged it as spam"
    score = getattr(message, "spam_score", None)
    limit = float(app_settings.INBOUND_EMAIL["MAX_SPAM_SCORE"])
    if score is not None and float(score) > limit:
        return f"the ESP's spam score {score} is above {limit}"
    results = message.get_all("Authentication-Results") or []
    if results and _AUTH_FAILED.search(str(results[0])):
        return f"the receiving server's authentication failed ({str(results[0])[:200]})"
    return ""


def _addresses(message: Any) -> Iterable[str]:
    if getattr(message, "envelope_recipient", None):
        yield str(message.envelope_recipient)
    for header in ("To", "Cc", "Delivered-To"):
        for address in message.get_address_header(header):
            yield str(address.addr_spec)


def _answer(message: Any, to: str, text: str, reply_to: str = "") -> None:
    """An answer to the reply: plain text, marked automatic (``Auto-Submitted``) so that no
    robot answers it in turn. Never raises."""
    subject = str(message.get("Subject") or "your reply")
    headers = {"Auto-Submitted": "auto-replied"}
    if message.get("Message-ID"):
        headers["In-Reply-To"] = str(message["Message-ID"])
        headers["References"] = str(message["Message-ID"])
    mail = EmailMessage(
        subject=subject if subject.lower().startswith("re:") else f"Re: {subject}",
        body=text,
        from_email=app_settings.INBOUND_EMAIL["FROM_EMAIL"] or settings.DEFAULT_FROM_EMAIL,
        to=[to],
        reply_to=[reply_to] if reply_to else None,
        headers=headers,
    )
    try:
        mail.send(fail_silently=False)
    except Exception:  # an answer never fails the webhook
        logger.exception("Could not answer the e-mail reply of %s", to)


def receive(message: Any) -> str:
    """Handle an inbound e-mail (an ``AnymailInboundMessage``): decide the review it answers, or
    refuse it (see the module's steps). Returns what came of it (``RECORDED``, ...)."""
    if _automatic(message):
        return IGNORED
    why = _suspicious(message)
    if why:
        logger.warning("E-mail reply refused, not answered: %s", why)
        return SUSPICIOUS
    sender = message.from_email
    sender_address = str(getattr(sender, "addr_spec", "") or "")
    if not sender_address:
        return IGNORED  # nobody to answer
    tokens = [t for t in (reply_tokens.token_in(a) for a in _addresses(message)) if t]
    if not tokens:
        _answer(
            message,
            sender_address,
            "This address only takes replies to review notifications, and your e-mail does not "
            "answer one: reply to the notification itself (its reply address names the review). "
            "Nothing was applied.",
        )
        return REFUSED
    try:
        token = reply_tokens.read_token(tokens[0])
    except reply_tokens.ExpiredReplyToken:
        _answer(
            message,
            sender_address,
            "The notification you answered is too old to decide from: open the review queue "
            "instead. Nothing was applied.",
        )
        return REFUSED
    except reply_tokens.BadReplyToken:
        _answer(
            message,
            sender_address,
            "The address you replied to is not one of our notifications' (it was changed or "
            "made up). Nothing was applied.",
        )
        return REFUSED
    user = get_user_model().objects.filter(pk=token.user, is_active=True).first()
    if user is None or str(user.email or "").lower() != sender_address.lower():
        _answer(
            message,
            sender_address,
            "This notification was sent to somebody else: only its recipient may answer it, "
            "from the address it was sent to. Nothing was applied.",
        )
        return REFUSED
    return _decide_reply(message, sender_address, user, token)


def _decide_reply(message: Any, to: str, user: Any, token: reply_tokens.ReplyToken) -> str:
    review = Review.objects.select_related("thread").filter(pk=token.review).first()
    if review is None:
        _answer(message, to, f"Review #{token.review} no longer exists. Nothing was applied.")
        return REFUSED
    if review.revision != token.revision or not review.digest.lower().startswith(
        token.digest_start
    ):
        return _changed(message, to, user, review)
    text = str(getattr(message, "stripped_text", None) or message.text or "")
    command = command_of(text[:MAX_READ] or html_text(str(message.html or "")))
    try:
        body = _decision(review, command)
    except InvalidArgumentError as exc:
        _answer(message, to, f"{exc} Nothing was applied.\n\n{_help(review)}")
        return REFUSED
    body = {**body, "revision": review.revision, "digest": review.digest}
    try:
        recorded = decide(review.pk, user, body, via="email")
    except (InteractionConflictError, ReviewNotPendingError):
        return _changed(message, to, user, Review.objects.get(pk=review.pk))
    except NitroAssistantsError as exc:  # not allowed, not in the group, does not fit
        _answer(message, to, f"{exc} Nothing was applied.")
        return REFUSED
    if isinstance(recorded, Approval):
        progress = waiting_for(Review.objects.select_related("handling__group").get(pk=review.pk))
        _answer(message, to, f"Your approval of review #{review.pk} is recorded ({progress}).")
    else:
        verb = "rejected" if "reject" in recorded.actions else "decided"
        if all(a in ("approve", "accept") for a in recorded.actions):
            verb = "approved"
        _answer(message, to, f"Recorded: review #{review.pk} {verb}.")
    return RECORDED


def _options(review: Review) -> list[dict[str, Any]]:
    questions = (review.payload.get("interaction") or {}).get("questions")
    if (
        review.kind != Review.Kind.QUESTION
        or not isinstance(questions, list)
        or len(questions) != 1
    ):
        return []
    question = questions[0]
    if not isinstance(question, dict):
        return []
    return [o for o in question.get("options") or [] if isinstance(o, dict) and "optionId" in o]


def _help(review: Review) -> str:
    options = _options(review)
    named = ", ".join(f'"{o.get("label") or o["optionId"]}"' for o in options)
    return HELP.format(options=f", or one of the options: {named}" if named else "")


def _decision(review: Review, command: str) -> dict[str, Any]:
    """The decision a reply's ``command`` asks for on ``review``; ``InvalidArgumentError`` saying why when
    it is none."""
    if not command:
        raise InvalidArgumentError("Your reply has no command above the quoted e-mail.")
    first = command.split("\n", 1)[0].strip()
    options = _options(review)
    if options:
        for option in options:
            names = {str(option["optionId"]).lower(), str(option.get("label") or "").lower()}
            if first.lower().rstrip(".!") in names:
                question = review.payload["interaction"]["questions"][0]
                return {
                    "decision": "answer",
                    "answers": [
                        {
                            "questionId": str(question.get("questionId")),
                            "optionIds": [str(option["optionId"])],
                        }
                    ],
                }
    if review.kind not in (Review.Kind.TOOL_CALLS, Review.Kind.REPLY):
        raise InvalidArgumentError(f"“{first[:80]}” is none of this question's options.")
    if _APPROVE.match(first):
        if redacting.hidden_paths(review):
            # The e-mail showed it redacted: approving it would approve what was not shown.
            raise InvalidArgumentError(
                "This review holds values the e-mail could not show: open it in the admin to "
                "approve it."
            )
        return rules.approve_everything(review.kind, review.tool_calls)
    rejected = _REJECT.match(first)
    if rejected:
        reason = " ".join(rejected.group("reason").split())[: rules.MAX_NOTE]
        return rules.reject_everything(review.kind, review.tool_calls, reason)
    if first.lower().rstrip(".!:") == "reject":
        raise InvalidArgumentError('Say why you reject it, on the same line: "reject: <why>".')
    raise InvalidArgumentError(f"“{first[:80]}” is not a command this address understands.")


def _changed(message: Any, to: str, user: Any, review: Review) -> str:
    """The review is not what the notification showed: say so, with the new version and a
    reply address bound to it (when it can still be decided)."""
    if review.status != Review.Status.PENDING:
        _answer(
            message,
            to,
            f"Review #{review.pk} was already {review.get_status_display()}. Nothing was applied.",
        )
        return CHANGED
    held = held_text(review) if review.kind in rules.REVIEW_KINDS else review.get_kind_display()
    _answer(
        message,
        to,
        f"Review #{review.pk} changed since the notification you answered (revision "
        f"{review.revision} now). Nothing was applied. It now holds:\n\n{held}\n\n"
        f"To decide on this version, reply to this e-mail.\n{_help(review)}",
        reply_to=reply_tokens.reply_address(review, user.pk),
    )
    return CHANGED


__all__ = [
    "CHANGED",
    "IGNORED",
    "RECORDED",
    "REFUSED",
    "SUSPICIOUS",
    "command_of",
    "html_text",
    "receive",
]
