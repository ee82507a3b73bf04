from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from nitro_assistants.exceptions import InvalidArgumentError
from nitro_assistants.models import Stop, Thread
from nitro_assistants.services import stops


class Command(BaseCommand):
    help = (
        "The stop button from the shell. `stop --all|--assistant KEY|--tool NAME|--thread UUID "
        "--reason TEXT`: refuse new runs, cancel running ones on the server, freeze pending "
        "reviews. `resume ID [--reviews-only]`: resume a stop (staged: reviews first). `list`: "
        "the stops in force. --as USERNAME records who (needs the stop_assistants permission)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        stop = sub.add_parser("stop", help="stop assistants")
        target = stop.add_mutually_exclusive_group(required=True)
        target.add_argument("--all", action="store_true", help="every assistant")
        target.add_argument("--assistant", help="an assistant key")
        target.add_argument("--tool", help="a tool's name")
        target.add_argument("--thread", help="a remote thread id (UUID)")
        stop.add_argument("--reason", required=True)
        stop.add_argument("--as", dest="username", help="who stops (a user's username)")
        resume = sub.add_parser("resume", help="resume a stop")
        resume.add_argument("stop_id", type=int)
        resume.add_argument(
            "--reviews-only",
            action="store_true",
            help="let the frozen reviews be decided again; new runs stay refused",
        )
        resume.add_argument("--as", dest="username", help="who resumes (a user's username)")
        sub.add_parser("list", help="the stops in force")

    def _user(self, username: str | None) -> Any:
        if not username:
            return None
        user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username})
        found = user.first()
        if found is None:
            raise CommandError(f"No user {username!r}")
        if not found.has_perm(stops.STOP_PERMISSION):
            raise CommandError(f"{username!r} lacks the {stops.STOP_PERMISSION} permission")
        return found

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "list":
            for row in stops.in_force():
                self.stdout.write(f"{row.pk}\t{row.explanation}")
            return
        user = self._user(options.get("username"))
        if action == "resume":
            try:
                row = Stop.objects.get(pk=options["stop_id"])
            except Stop.DoesNotExist:
                raise CommandError(f"No stop {options['stop_id']}") from None
            stage: stops.Stage = "reviews" if options["reviews_only"] else "all"
            row = stops.resume(row, user, stage=stage)
            self.stdout.write(f"Resumed ({stage}): {row.target}")
            return
        thread = None
        scope = Stop.Scope.ALL
        if options["assistant"]:
            scope = Stop.Scope.ASSISTANT
        elif options["tool"]:
            scope = Stop.Scope.TOOL
        elif options["thread"]:
            scope = Stop.Scope.THREAD
            try:
                thread = Thread.objects.get(thread_id=options["thread"])
            except (Thread.DoesNotExist, ValidationError) as exc:
                raise CommandError(f"No thread {options['thread']!r}") from exc
        try:
            row = stops.stop(
                user,
                scope=scope,
                reason=options["reason"],
                assistant=options["assistant"] or "",
                tool=options["tool"] or "",
                thread=thread,
            )
        except InvalidArgumentError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Stop {row.pk}: {row.explanation}")
        self.stdout.write(f"Runs cancelled on the server: {len(row.cancelled_runs)}")
        for failure in row.cancel_failures:
            self.stderr.write(f"Could not cancel run {failure['run']}: {failure['error']}")
