from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nitro_assistants import services
from nitro_assistants.exceptions import ThreadNotCreatedError
from nitro_assistants.models import Thread


class Command(BaseCommand):
    help = (
        "Reconcile the local mirror with the Assistants server, for all threads or some. A thread "
        "that cannot be synced does not stop the others: each is reported on stderr with its "
        "reason, and the command exits non-zero if any failed. A thread the server never created "
        "(its first run failed before reaching it) is reported and skipped, not failed."
    )

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
        failed: list[tuple[Thread, str]] = []
        skipped: list[tuple[Thread, str]] = []
        for done, thread in enumerate(threads.iterator(chunk_size=200), start=1):
            try:
                services.sync_thread(thread)
            except ThreadNotCreatedError as exc:
                skipped.append((thread, str(exc)))
            except Exception as exc:  # one bad thread must not stop the others
                failed.append((thread, f"{type(exc).__name__}: {exc}"))
            if show_progress:
                self._progress(done, total)
        if show_progress:
            self.stdout.write("")
        # Reasons come after the bar, one line each, rather than in between its updates.
        for thread, reason in skipped:
            self.stderr.write(f"skipped {thread.thread_id} ({thread.assistant_key}): {reason}")
        for thread, reason in failed:
            self.stderr.write(f"failed {thread.thread_id} ({thread.assistant_key}): {reason}")
        synced = total - len(failed) - len(skipped)
        summary = f"Synced {synced} of {total} thread(s)"
        if skipped:
            summary += f"; {len(skipped)} skipped (never created on the server)"
        if failed:
            summary += f"; {len(failed)} failed"
        style = self.style.WARNING if failed or skipped else self.style.SUCCESS
        self.stdout.write(style(summary + "."))
        if failed:
            raise CommandError(f"{len(failed)} thread(s) could not be synced; see above.")

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // total
        self.stdout.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", ending="")
        self.stdout.flush()
