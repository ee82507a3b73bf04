from __future__ import annotations

from django.contrib import admin

from reviewsite.models import Appointment


@admin.register(Appointment)
class AppointmentAdmin(admin.ModelAdmin):
    list_display = ["id", "customer", "day", "time", "technician", "updated_at"]
    readonly_fields = ["updated_at"]


admin.site.site_header = "Review site (nitro_assistants demo)"
admin.site.site_title = "Review site"
