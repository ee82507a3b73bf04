"""The example site's own records: the appointments the demo plan's operations change."""

from __future__ import annotations

from django.db import models


class Appointment(models.Model):
    """A customer's appointment, as a CRM would keep it."""

    customer = models.CharField(max_length=200)
    phone = models.CharField(max_length=32)
    technician = models.CharField(max_length=200)
    technician_phone = models.CharField(max_length=32)
    day = models.CharField(max_length=32)
    time = models.CharField(max_length=8)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"Appointment {self.pk}: {self.customer}, {self.day} at {self.time}"
