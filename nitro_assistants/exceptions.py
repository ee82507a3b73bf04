"""Every error nitro_assistants raises has one root, :class:`NitroAssistantsError`.

No Django import here: :mod:`nitro_assistants.client` re-exports these and must run without Django.
"""

from __future__ import annotations

from typing import Any


class NitroAssistantsError(Exception):
    """Root of every error this package raises.

    ``transient`` is true when the cause may go away on its own (a connection error, a timeout,
    a 502/503/504): worth retrying. ``status_code`` is the HTTP status, when there was one.
    """

    transient: bool = False
    status_code: int | None = None

    def __init__(self, *args: object, transient: bool = False, status_code: int | None = None):
        super().__init__(*args)
        self.transient = transient
        self.status_code = status_code


class InvalidArgumentError(NitroAssistantsError, ValueError):
    """A function of the package was given a value it cannot take (a programming error: an
    operation without a name, a decision of a shape the middleware does not take)."""


class UsageError(NitroAssistantsError, TypeError):
    """A function of the package was called with arguments it does not take."""


class ConfigurationError(NitroAssistantsError):
    """A client or an assistant definition is configured wrongly (blank key, missing field)."""


class ThreadInitializationError(NitroAssistantsError):
    """A thread could not be created or seeded, or the assistant has no graph."""


class RunError(NitroAssistantsError):
    """A run was refused by the server, failed inside the graph, or was given no messages."""


class ThreadStateError(NitroAssistantsError):
    """A thread's state could not be read."""


class ThreadNotCreatedError(ThreadStateError):
    """The server has no such thread because none of its runs ever got through (its first run
    failed before the server created it): there is nothing to read or sync."""


class ThreadResumptionError(NitroAssistantsError):
    """A review could not be applied: invalid for the pause, or refused by the server."""


class ReviewSupersededError(ThreadResumptionError):
    """The thread is no longer paused on the review answered; nothing was applied."""

    def __init__(
        self, message: str, *, thread_id: str = "", interrupt_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.interrupt_id = interrupt_id


class TransportError(NitroAssistantsError):
    """A request never got an answer (connection refused, timed out, cut short). Always
    transient."""

    def __init__(self, *args: object, status_code: int | None = None) -> None:
        super().__init__(*args, transient=True, status_code=status_code)


class ResultShapeError(NitroAssistantsError, ValueError):
    """A run result the client cannot read: messages or tool calls that are not objects."""


class ReviewShapeError(ResultShapeError):
    """A pause the client cannot read: an action with no matching tool call, an unknown shape,
    interrupts that are not objects with a ``value``, an id too long to be answered."""


class UnknownAssistantError(NitroAssistantsError, KeyError):
    """The registry has no definition under that key."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class InteractionDecisionError(ThreadResumptionError):
    """A decision on a typed interaction does not fit it (docs/protocol.md §8): ``field`` names the
    request field at fault (``""`` for the body as a whole) and ``issues`` says what is wrong."""

    def __init__(self, message: str, *, field: str = "", issues: list[str] | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.issues = list(issues or [message])


class InteractionConflictError(InteractionDecisionError):
    """The decision names a revision or digest other than the pending one: stale, nothing stored."""


class InteractionForbiddenError(InteractionDecisionError):
    """The user may not take this decision: not the session's opener, or missing permissions
    (``issues`` lists them)."""


class PolicyForbiddenError(InteractionForbiddenError):
    """A review's policy rule keeps this person from deciding it: not in the rule's group, or
    approving the action of a run they started (separation of duties)."""


class ReviewNotPendingError(InteractionConflictError):
    """A local review was already decided, superseded or closed: nothing was recorded."""

    def __init__(self, message: str, *, review: object | None = None) -> None:
        super().__init__(message, field="revision")
        self.review = review


class ReviewExpiredError(ReviewNotPendingError):
    """The review expired unanswered (its deadline or the pause's own ``expiresAt`` passed): no
    decision or dismissal is taken any more (the API answers 409 ``expired``)."""


class ReviewStateError(NitroAssistantsError):
    """A review was asked to move to a status its lifecycle does not allow from where it is
    (:data:`nitro_assistants.rules.TRANSITIONS`): a bug in the caller, never user input."""

    def __init__(self, message: str, *, review: object | None = None) -> None:
        super().__init__(message)
        self.review = review


class LaunchError(NitroAssistantsError, RuntimeError):
    """A process :mod:`nitro_assistants.testing.launchers` started (``langgraph dev``, a Celery
    worker, Redis) exited or did not answer in time; the message ends with its log's last lines."""


class StoppedError(NitroAssistantsError):
    """Staff stopped what this would touch (``nitro_assistants.services.stops``); the message
    says who stopped what and why, and ``stop`` is the :class:`~nitro_assistants.models.Stop`."""

    def __init__(self, *args: object, stop: Any = None) -> None:
        super().__init__(*args)
        self.stop = stop


class RunsStoppedError(StoppedError, RunError):
    """A new run (or a queued one) of a stopped assistant, thread, or of everything."""


class ReviewsStoppedError(StoppedError, InteractionConflictError):
    """A decision or dismissal of a review frozen by a stop (the API answers 409 ``conflict``)."""
