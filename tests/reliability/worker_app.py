"""The Celery app of the reliability suite's workers: the test app, plus a log of every
nitro_assistants signal the worker sends (JSON lines in ``$NITRO_REL_SIGNAL_LOG``), so a test can
count them across processes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nitro_assistants import signals
from tests.celery_app import app

SIGNALS = (
    "review_requested",
    "review_decided",
    "review_superseded",
    "run_failed",
    "delivery_delivered",
    "delivery_failed",
    "delivery_pending",
)


def _receiver(name: str) -> Any:
    def record(sender: Any, **kwargs: Any) -> None:
        path = os.environ.get("NITRO_REL_SIGNAL_LOG")
        if not path:
            return
        line = {"signal": name}
        for key in ("run", "review", "thread", "delivery"):
            if kwargs.get(key) is not None:
                line[key] = str(kwargs[key].pk)
        if "error" in kwargs:
            line["error"] = str(kwargs["error"])
        with Path(path).open("a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")

    return record


for _name in SIGNALS:
    getattr(signals, _name).connect(_receiver(_name), weak=False, dispatch_uid=f"rel-{_name}")

__all__ = ["app"]
