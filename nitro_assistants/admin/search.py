"""What the review queue's and the thread list's search box finds: a whole thread id, the start
of one (lists show the first 8 characters), who the conversation is about (``Thread.subject``),
the text of its messages, and what a review holds (tool names and arguments, reply drafts,
questions and plans).

On PostgreSQL each ``icontains`` below is served by a trigram index (migration 0010) written on
exactly the expression Django compares, ``UPPER(column::text)``.
"""

from __future__ import annotations

import re
import uuid

from django.db.models import Q

from nitro_assistants import redacting
from nitro_assistants.models import Review, Thread

#: Hex (and dashes) long enough to be meant as the start of a thread id.
THREAD_ID_PREFIX = re.compile(r"[0-9a-fA-F]{4,32}|[0-9a-fA-F-]{9,35}")


# Four digits in a row (separators allowed) or an "@": enough of a card, phone, IBAN or e-mail
# address to confirm, by what a search finds, a value the screens redact.
_REVEALING = re.compile(r"@|\d(?:[\s.-]?\d){3}")


def may_search_content(term: str, user: object) -> bool:
    """Whether ``term`` may be looked for in what conversations and reviews hold. With
    ``REDACT`` on, a term that is (or could be a piece of) a redacted value is not, for anyone
    without the reveal permission: what a search finds would confirm what the screens hide."""
    redaction = redacting.current()
    if not redaction or redacting.may_reveal(user):
        return True
    return redaction.text(term) == term and not _REVEALING.search(term)


def whole_thread_id(term: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(term)
    except ValueError:
        return None


def conversation_matches(term: str) -> Q:
    """Threads matching ``term`` (which is not a whole thread id)."""
    matches = Q(subject__icontains=term) | Q(values__icontains=term)
    if THREAD_ID_PREFIX.fullmatch(term):
        matches |= Q(thread_id__istartswith=term)
    return matches


def review_matches(term: str) -> Q:
    """Reviews matching ``term``: what they hold, or their thread.

    One ``pk IN (... UNION ...)``: each side is answered by its own trigram index and the queue
    then joins the few matches. Written as ``payload LIKE ... OR thread_id IN (...)`` it made
    PostgreSQL test every pending review's payload in turn (0.3 to 0.6 s at 100,000 reviews,
    against 10 ms this way: bench/review_queue.py).
    """
    held = Review.objects.filter(payload__icontains=term).order_by().values("pk")
    threads = Thread.objects.filter(conversation_matches(term)).order_by().values("pk")
    about = Review.objects.filter(thread__in=threads).order_by().values("pk")
    return Q(pk__in=held.union(about))
