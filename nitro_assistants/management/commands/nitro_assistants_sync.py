from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nitro_assistants import services
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import Thread


class Command(BaseCommand):
    help = "Reconcile the local mirror with the Assistants server, for all threads or some."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("thread_ids", nargs="*", help="remote thread ids (UUIDs); default: all")
        parser.add_argument("--assistant", help="only threads of this assistant key")
        parser.add_argument(
            "--status", choices=Thread.Status.values, help="only threads in this status"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        threads = Thread.objects.order_by("pk")
        if options["thread_ids"]:
            threads = threads.filter(thread_id__in=options["thread_ids"])
        if options["assistant"]:
            threads = threads.filter(assistant_key=options["assistant"])
        if options["status"]:
            threads = threads.filter(status=options["status"])
        total = threads.count()
        show_progress = not options["no_progress"] and total > 0
        failed = 0
        for done, thread in enumerate(threads.iterator(chunk_size=200), start=1):
            try:
                services.sync_thread(thread)
            except NitroAssistantsError as exc:
                failed += 1
                self.stderr.write(f"\n{thread.thread_id}: {exc}")
            if show_progress:
                self._progress(done, total)
        if show_progress:
            self.stdout.write("")
        self.stdout.write(
            self.style.SUCCESS(f"Synced {total - failed} of {total} thread(s).")
            if not failed
            else self.style.WARNING(
                f"Synced {total - failed} of {total} thread(s); {failed} failed."
            )
        )
        if failed:
            raise CommandError(f"{failed} thread(s) could not be synced.")

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // total
        self.stdout.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", ending="")
        self.stdout.flush()
