"""Operations a plan's steps may run (docs/protocol.md §8), registered by the host app::

    import nitro_assistants

    @nitro_assistants.operation("crm.reschedule", permissions=["crm.change_appointment"])
    def reschedule(input: dict, user) -> dict:
        appointment = Appointment.objects.get(pk=input["appointment_id"])
        ...
        return {"message": "Moved to Friday", "link": appointment.get_absolute_url(),
                "resourceId": str(appointment.pk), "resourceKind": "appointment"}

A step's ``action`` names the operation; the function gets the step's ``input`` (with the
reader's edits applied) and the user who approved the plan, and returns ``None`` or a dict with
any of ``message``, ``link``, ``resourceId``, ``resourceKind``. Raising fails the step, with the
exception's text as its message. Register operations where Django imports them at start-up
(e.g. an ``AppConfig.ready``) so the Celery workers know them too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nitro_assistants.exceptions import InvalidArgumentError

OperationFunction = Callable[[dict[str, Any], Any], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Operation:
    name: str
    function: OperationFunction
    permissions: tuple[str, ...] = ()

    def __call__(self, input: dict[str, Any], user: Any) -> dict[str, Any] | None:
        return self.function(input, user)


_registry: dict[str, Operation] = {}


def operation(
    name: str, permissions: Iterable[str] = ()
) -> Callable[[OperationFunction], OperationFunction]:
    """Register the decorated function as the operation ``name``; a plan step whose ``action``
    is ``name`` runs it, by a user holding every permission in ``permissions``
    (``"app_label.codename"``). Registering a name again replaces the earlier operation."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError("An operation needs a name, e.g. 'crm.reschedule'")
    perms = tuple(permissions)

    def register(function: OperationFunction) -> OperationFunction:
        _registry[name] = Operation(name=name, function=function, permissions=perms)
        return function

    return register


def get_operation(name: str) -> Operation | None:
    return _registry.get(name)


def registered() -> dict[str, Operation]:
    """Every registered operation by name (a copy)."""
    return dict(_registry)


def unregister(name: str) -> None:
    _registry.pop(name, None)
