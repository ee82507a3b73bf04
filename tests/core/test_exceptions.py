"""Every exception the package raises derives from NitroAssistantsError (one except clause catches
them all); where a builtin fits, it is a second base, so ``except ValueError`` keeps working."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from pathlib import Path

import pytest

from nitro_assistants.exceptions import NitroAssistantsError

PACKAGE = Path(__file__).resolve().parents[2] / "nitro_assistants"
#: A builtin raised on purpose: the scripted model of agent/testing.py raises what a real model
#: would (a ValueError), and an unreachable branch asserts.
ALLOWED = {("agent/testing.py", "ValueError"), ("client/http.py", "AssertionError")}


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("name", modules())
def test_every_exception_class_of_the_package_has_the_one_root(name: str) -> None:
    module = importlib.import_module(name)
    for cls_name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ == name and issubclass(cls, BaseException):
            assert issubclass(cls, NitroAssistantsError), f"{name}.{cls_name}"


def test_no_builtin_exception_is_raised_directly() -> None:
    builtin = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)}
    raised = set()
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                func = node.exc.func
                if isinstance(func, ast.Name) and func.id in builtin:
                    raised.add((str(path.relative_to(PACKAGE)), func.id))
    assert raised <= ALLOWED, sorted(raised - ALLOWED)
