"""``nitro_assistants_audit verify | export | check-export | prune``: the audit trail's evidence
commands."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from nitro_assistants.models import Thread
from nitro_assistants.services import chain_verify, evidence


def when(value: str | None, option: str) -> datetime.datetime | None:
    """An ISO 8601 date (midnight UTC) or date-time (UTC when it names no zone)."""
    if value is None:
        return None
    try:
        parsed = parse_datetime(value)
        if parsed is None:
            day = parse_date(value)
            if day is not None:
                parsed = datetime.datetime.combine(day, datetime.time())
    except ValueError:
        parsed = None
    if parsed is None:
        raise CommandError(
            f"{option}: `{value}` is not a date (YYYY-MM-DD) or an ISO 8601 date-time"
        )
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, datetime.UTC)
    return parsed


def thread_named(value: str | None) -> Thread | None:
    if value is None:
        return None
    found = Thread.objects.filter(thread_id=value).first() if _is_uuid(value) else None
    if found is None:
        raise CommandError(f"--thread: no thread `{value}` (give its remote thread id)")
    return found


def _is_uuid(value: str) -> bool:
    try:
        Thread._meta.get_field("thread_id").to_python(value)
    except Exception:  # a ValidationError, whatever the field says
        return False
    return True


class Progress:
    """``n/total events`` rewritten in place on a terminal; nothing when not one."""

    def __init__(self, stream: Any, total: int) -> None:
        self.stream, self.total = stream, total
        self.on = bool(getattr(stream, "isatty", lambda: False)()) and total > 0

    def __call__(self, done: int) -> None:
        if not self.on:
            return
        width = 30
        filled = int(width * done / self.total) if self.total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r[{bar}] {done:,}/{self.total:,} events")
        self.stream.flush()

    def close(self) -> None:
        if self.on:
            self.stream.write("\n")


class Command(BaseCommand):
    help = (
        "The audit trail as evidence: verify its hash chain, export it (JSONL or CSV, ending "
        "with each chain's head), or prune old events behind a checkpoint."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, parser_class=type(parser))
        verify = sub.add_parser("verify", help="Walk the chain; exit 1 at a broken link.")
        export = sub.add_parser("export", help="Stream the trail to standard output.")
        check = sub.add_parser(
            "check-export",
            help="Walk a JSONL export's chains (signed checkpoints checked with AUDIT_KEY); "
            "exit 1 at a broken link.",
        )
        prune = sub.add_parser("prune", help="Delete events before a date, keeping a checkpoint.")
        for each in (verify, export):
            each.add_argument("--thread", help="one thread (its remote thread id)")
            each.add_argument("--since", help="from this date or date-time (included)")
            each.add_argument("--until", help="up to this date or date-time (excluded)")
        export.add_argument("--format", default="jsonl", help="jsonl (default) or csv")
        export.add_argument("--assistant", help="only the threads of this assistant key")
        check.add_argument("file", help="the JSONL export")
        check.add_argument(
            "--partial",
            action="store_true",
            help="the export is of a time range: check each chain from its first exported event",
        )
        prune.add_argument("--before", required=True, help="delete events before this date")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "verify":
            self.verify(options)
        elif action == "export":
            self.export(options)
        elif action == "check-export":
            self.check_export(options)
        else:
            self.prune(options)

    def verify(self, options: dict[str, Any]) -> None:
        since, until = when(options["since"], "--since"), when(options["until"], "--until")
        thread = thread_named(options["thread"])
        total = chain_verify.count(thread=thread, since=since, until=until)
        progress = Progress(self.stderr._out, total)
        result = chain_verify.verify(thread=thread, since=since, until=until, progress=progress)
        progress.close()
        if result.broken is not None:
            for broken in result.breaks:
                self.stderr.write(f"BROKEN {broken}")
            raise CommandError(
                f"The audit trail is broken: {len(result.breaks)} chain(s) of {result.chains}; "
                f"first at event #{result.broken.pk}",
                returncode=1,
            )
        self.stdout.write(
            f"The audit trail is whole: {result.events} event(s) in {result.chains} chain(s)."
        )

    def export(self, options: dict[str, Any]) -> None:
        fmt = options["format"]
        if fmt not in evidence.FORMATS:
            raise CommandError(f"--format: `{fmt}` is not one of {', '.join(evidence.FORMATS)}")
        since, until = when(options["since"], "--since"), when(options["until"], "--until")
        thread = thread_named(options["thread"])
        events, threads = evidence.selection(
            since=since,
            until=until,
            threads=Thread.objects.filter(pk=thread.pk) if thread else None,
            assistant=options["assistant"],
        )
        rows = evidence.export_rows(events, threads)
        out: Any = self.stdout._out  # the stream itself: one write per line, no styling
        count = evidence.write(rows, out, fmt)
        out.flush()
        self.stderr.write(f"{count} event(s) exported.")

    def check_export(self, options: dict[str, Any]) -> None:
        path = Path(options["file"])
        try:
            with path.open(encoding="utf-8") as export:
                rows = [json.loads(line) for line in export if line.strip()]
        except (OSError, ValueError) as exc:
            raise CommandError(f"{path}: not a JSONL export ({exc})") from None
        breaks = evidence.verify_export(rows, partial=options["partial"])
        if breaks:
            for broken in breaks:
                self.stderr.write(f"BROKEN {broken}")
            raise CommandError(f"The export is broken: {len(breaks)} chain(s)", returncode=1)
        events = sum("chain_head" not in row for row in rows)
        self.stdout.write(f"The export is whole: {events} event(s).")

    def prune(self, options: dict[str, Any]) -> None:
        before = when(options["before"], "--before")
        if before is None:  # argparse requires it; a guard for call_command
            raise CommandError("--before: give a date")
        if before > timezone.now():
            raise CommandError("--before: the date is in the future; nothing newer is pruned")
        try:
            result = chain_verify.prune(before)
        except chain_verify.PruneError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{result.events} event(s) pruned from {result.chains} chain(s); "
            f"{result.kept_open} thread(s) with an open review kept."
        )
