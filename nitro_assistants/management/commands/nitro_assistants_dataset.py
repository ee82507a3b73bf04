"""``nitro_assistants_dataset``: decided reviews as a dataset (JSONL, OpenAI fine-tuning chat,
LangSmith), streamed to standard output or a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nitro_assistants import redacting
from nitro_assistants.management.commands.nitro_assistants_audit import when
from nitro_assistants.services import datasets


class Command(BaseCommand):
    help = (
        "Export decided reviews as a dataset: the conversation up to the pause, what was "
        "proposed, what the person decided, what then ran, and its provenance. Name at least "
        "one filter, or --all."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--format",
            default="jsonl",
            help=f"{', '.join(datasets.FORMATS)} (default jsonl)",
        )
        parser.add_argument("--assistant", default="", help="an assistant key")
        parser.add_argument("--tool", default="", help="a held call's tool name or glob")
        parser.add_argument("--kind", default="", help="a review kind (tool_calls, reply, ...)")
        parser.add_argument(
            "--decision", default="", help="a decision's action (approve, edit, reject, ...)"
        )
        parser.add_argument("--rule", default="", help="the name of the policy rule it fell under")
        parser.add_argument("--since", help="decided from this date or date-time (included)")
        parser.add_argument("--until", help="decided before this date or date-time")
        parser.add_argument(
            "--all", action="store_true", help="every decided review (no filter needed)"
        )
        parser.add_argument("--output", help="write to this file instead of standard output")
        parser.add_argument(
            "--unredacted",
            action="store_true",
            help="do not apply the REDACT setting (the shell reads the database anyway)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        filters = datasets.Filters(
            assistant=options["assistant"],
            tool=options["tool"],
            kind=options["kind"],
            decision=options["decision"],
            rule=options["rule"],
            since=when(options["since"], "--since"),
            until=when(options["until"], "--until"),
        )
        redaction = None if options["unredacted"] else redacting.current()
        try:
            lines = datasets.export(
                None,
                options["format"],
                filters,
                everything=options["all"],
                redaction=redaction,
            )
        except datasets.DatasetError as exc:
            raise CommandError(str(exc)) from None
        count = self._write(lines, options["output"])
        if not count:
            raise CommandError(
                "nothing exported: no decided review matches"
                + (" with a line in this format" if options["format"] == "openai" else "")
            )
        self.stderr.write(f"{count} line(s) exported.")

    def _write(self, lines: Any, output: str | None) -> int:
        count = 0
        if output:
            path = Path(output)
            try:
                with path.open("w", encoding="utf-8") as out:
                    for line in lines:
                        out.write(line)
                        count += 1
            except OSError as exc:
                raise CommandError(f"--output: cannot write {path} ({exc})") from None
            return count
        stream: Any = self.stdout._out  # the stream itself: one write per line, no styling
        for line in lines:
            stream.write(line)
            count += 1
        stream.flush()
        return count
