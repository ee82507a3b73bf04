"""The operations the demo assistant's plans name (see docs/api.md, "Plans and operations").

Approving the seeded plan ("Move the appointment and tell the technician") runs its steps in
Celery: ``crm.reschedule`` moves the appointment (shown in the admin under Appointments) and
``crm.notify`` texts the technician (shown in the SMS outbox). Each returns what the review
screen and the API show as the step's result.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse

import nitro_assistants
from reviewsite import outbox
from reviewsite.models import Appointment


def _appointment(input: dict[str, Any]) -> Appointment:
    try:
        return Appointment.objects.get(pk=int(input["appointment_id"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError("The step names no appointment (input.appointment_id)") from exc
    except Appointment.DoesNotExist as exc:
        raise ValueError(f"There is no appointment {input['appointment_id']}") from exc


@nitro_assistants.operation("crm.reschedule", permissions=["reviewsite.change_appointment"])
def reschedule(input: dict[str, Any], user: Any) -> dict[str, Any]:
    appointment = _appointment(input)
    day = str(input.get("day") or "").strip()
    if not day:
        raise ValueError("The step names no day to move the appointment to")
    before = appointment.day
    appointment.day = day
    if input.get("time"):
        appointment.time = str(input["time"]).strip()
    appointment.save(update_fields=["day", "time", "updated_at"])
    return {
        "message": f"Moved {appointment.customer}'s appointment from {before} to {day} "
        f"at {appointment.time}",
        "link": reverse("admin:reviewsite_appointment_change", args=[appointment.pk]),
        "resourceId": str(appointment.pk),
        "resourceKind": "appointment",
    }


@nitro_assistants.operation("crm.notify", permissions=["reviewsite.view_appointment"])
def notify(input: dict[str, Any], user: Any) -> dict[str, Any]:
    appointment = _appointment(input)
    outbox.send(
        appointment.technician_phone,
        f"{appointment.customer}'s appointment is now on {appointment.day} at {appointment.time}.",
    )
    return {
        "message": f"Texted {appointment.technician} the new time",
        "link": reverse("outbox"),
    }
