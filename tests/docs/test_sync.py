"""The docs name what the code has, and nothing else: settings, Celery tasks and the beat
schedule, signals, management commands, system check ids, the URL prefixes.

Each name is read from the code (``AppSettings.DEFAULTS``, the tasks registered in
``nitro_assistants.tasks``, the ``Signal`` objects of ``nitro_assistants.signals`` with their
``#:`` comments, the files of ``management/commands/``, the ids in ``checks.py``) and from the
docs (README.md and docs/*.md), and compared both ways. A failure says what to add where.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from celery import Task
from django.contrib.auth import get_user_model
from django.dispatch import Signal
from django.test import Client

from nitro_assistants import signals, tasks
from nitro_assistants.checks import SUPPORTED_VENDORS
from nitro_assistants.conf import AppSettings
from nitro_assistants.services.sql.reads import VERIFIED_DJANGO
from tests.docs.markdown import DOCS, ROOT, all_blocks, code_names, section, table_rows

README = ROOT / "README.md"
DJANGO = ROOT / "docs" / "django.md"
API = ROOT / "docs" / "api.md"
PACKAGE = ROOT / "nitro_assistants"


def docs_text() -> str:
    return "\n".join(path.read_text() for path in DOCS)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# -- settings -------------------------------------------------------------------------------------


def dict_keys(code: str, name: str) -> set[str] | None:
    """Top-level keys of the dict assigned to ``name`` in ``code``; None when there is none."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return None


def settings_reference() -> set[str]:
    """The keys of the ``NITRO_ASSISTANTS = {...}`` block under "Settings" in docs/django.md."""
    text = section(DJANGO, "Settings")
    found = [
        keys
        for block in all_blocks()
        if block.path == DJANGO and block.code in text + "\n"
        for keys in [dict_keys(block.code, "NITRO_ASSISTANTS")]
        if keys is not None
    ]
    assert found, "docs/django.md: the Settings section has no NITRO_ASSISTANTS = {...} block"
    return found[0]


def test_every_setting_is_in_the_settings_reference() -> None:
    missing = sorted(set(AppSettings.DEFAULTS) - settings_reference())
    assert not missing, (
        f"Settings in nitro_assistants/conf.py (AppSettings.DEFAULTS) missing from the "
        f"NITRO_ASSISTANTS block under 'Settings' in docs/django.md: {missing}. Add each as "
        f'"KEY": <default>,  # what it does'
    )


def test_every_documented_setting_exists() -> None:
    documented: dict[str, str] = {}
    for block in all_blocks():
        for key in dict_keys(block.code, "NITRO_ASSISTANTS") or ():
            documented.setdefault(key, block.where)
    for path in DOCS:
        for match in re.finditer(
            r"NITRO_ASSISTANTS\[\s*[\"']([A-Za-z_]+)[\"']\s*\]", path.read_text()
        ):
            documented.setdefault(match.group(1), rel(path))
    unknown = {key: where for key, where in documented.items() if key not in AppSettings.DEFAULTS}
    assert not unknown, (
        f"Settings documented but not in nitro_assistants/conf.py AppSettings.DEFAULTS: {unknown}. "
        "Remove them from the docs, or add the setting (a default and a property) to conf.py"
    )


# -- Celery tasks ---------------------------------------------------------------------------------


def code_tasks() -> dict[str, Task]:
    return {v.name: v for v in vars(tasks).values() if isinstance(v, Task)}


def periodic_tasks() -> set[str]:
    """Tasks that take no argument: nothing enqueues them with a primary key, so only a beat
    schedule runs them."""
    return {
        name for name, task in code_tasks().items() if not inspect.signature(task.run).parameters
    }


def task_table() -> dict[str, list[str]]:
    rows = table_rows(section(DJANGO, "Celery tasks"))
    return {code_names(row[0])[0]: row for row in rows if code_names(row[0])}


def test_the_task_table_lists_exactly_the_registered_tasks() -> None:
    registered, documented = set(code_tasks()), set(task_table())
    assert registered, "found no tasks in nitro_assistants.tasks"
    assert not registered - documented, (
        f"Tasks registered in nitro_assistants/tasks.py missing from the table under 'Celery "
        f"tasks' in docs/django.md: {sorted(registered - documented)}. Add a row: "
        "| `nitro_assistants.<name>` | argument | who enqueues it |"
    )
    assert not documented - registered, (
        f"docs/django.md 'Celery tasks' lists tasks nitro_assistants/tasks.py does not register: "
        f"{sorted(documented - registered)}"
    )


def test_the_task_table_says_which_tasks_are_periodic() -> None:
    said = {name for name, row in task_table().items() if "periodic" in " ".join(row[1:])}
    assert said == periodic_tasks(), (
        f"docs/django.md 'Celery tasks': the rows saying 'periodic' should be exactly the tasks "
        f"that take no argument, {sorted(periodic_tasks())}; they are {sorted(said)}"
    )


def beat_schedules() -> dict[str, set[str]]:
    """Every beat schedule written down: in the docs' code blocks, in the example site's
    settings and in the tasks module's docstring."""
    pattern = re.compile(r"[\"']task[\"']\s*:\s*[\"'](nitro_assistants\.\w+)[\"']")
    schedules = {}
    for block in all_blocks():
        if "beat_schedule" in block.code or "BEAT_SCHEDULE" in block.code:
            schedules[block.where] = set(pattern.findall(block.code))
    for path in (ROOT / "reviewsite" / "settings.py", PACKAGE / "tasks.py"):
        schedules[rel(path)] = set(pattern.findall(path.read_text()))
    return schedules


def test_every_beat_schedule_runs_every_periodic_task() -> None:
    periodic = periodic_tasks()
    assert periodic, "found no periodic task (one that takes no argument)"
    schedules = beat_schedules()
    assert any(where.startswith("docs/django.md") for where in schedules), (
        "docs/django.md has no beat schedule block"
    )
    wrong = {where: sorted(names) for where, names in schedules.items() if names != periodic}
    assert not wrong, (
        f"Each beat schedule must run exactly the periodic tasks {sorted(periodic)}; these do "
        f"not: {wrong}"
    )


def test_the_readme_names_every_periodic_task() -> None:
    install = section(README, "Install into a project")
    missing = sorted(name for name in periodic_tasks() if f"`{name}`" not in install)
    assert not missing, (
        f"README.md 'Install into a project' does not name the periodic tasks {missing}"
    )


# -- signals --------------------------------------------------------------------------------------


def code_signals() -> dict[str, tuple[str, list[str]]]:
    """``name -> (sender, argument names)`` from the ``#:`` comment above each Signal()."""
    source = (PACKAGE / "signals.py").read_text()
    found = {}
    for name, value in vars(signals).items():
        if not isinstance(value, Signal):
            continue
        match = re.search(rf"((?:^#:.*\n)+)^{name} = Signal\(\)", source, re.MULTILINE)
        assert match, f"nitro_assistants/signals.py: {name} has no #: comment above it"
        comment = " ".join(line[2:].strip() for line in match.group(1).splitlines())
        sender = re.search(r"sender: (\w+)", comment)
        provided = re.search(r"provides args: (.*)$", comment)
        assert sender and provided, (
            f"nitro_assistants/signals.py: the comment of {name} needs 'sender: Model.' and "
            "'provides args: name (type), ...'"
        )
        arguments = re.sub(r"\([^()]*\)", "", provided.group(1))
        found[name] = (sender.group(1), [a.strip() for a in arguments.split(",") if a.strip()])
    return found


def signal_table(path: Path) -> dict[str, tuple[str, list[str]]]:
    rows = table_rows(section(path, "Signals"))
    return {
        code_names(row[0])[0]: (code_names(row[1])[0], code_names(row[2]))
        for row in rows
        if code_names(row[0]) and code_names(row[1])
    }


def test_the_signal_tables_match_the_signals() -> None:
    signals_ = code_signals()
    assert signals_, "found no Signal in nitro_assistants/signals.py"
    for path in (README, DJANGO):
        table = signal_table(path)
        missing = sorted(set(signals_) - set(table))
        assert not missing, (
            f"Signals of nitro_assistants/signals.py missing from the table under 'Signals' in "
            f"{rel(path)}: {missing}. Add a row: | `name` | `Sender` | `arg`, `arg` |"
        )
        unknown = sorted(set(table) - set(signals_))
        assert not unknown, f"{rel(path)} 'Signals' lists signals that do not exist: {unknown}"
        differ = {
            name: {"code": signals_[name], "docs": table[name]}
            for name in signals_
            if table[name] != signals_[name]
        }
        assert not differ, (
            f"{rel(path)} 'Signals': sender or keyword arguments differ from the '#: sender: ... "
            f"provides args: ...' comments of nitro_assistants/signals.py: {differ}"
        )


# -- management commands --------------------------------------------------------------------------


def code_commands() -> set[str]:
    return {
        p.stem
        for p in (PACKAGE / "management" / "commands").glob("*.py")
        if not p.name.startswith("_")
    }


def test_every_command_is_documented_and_every_documented_one_exists() -> None:
    commands = code_commands()
    assert commands, "found no management command"
    documented = set(re.findall(r"manage\.py (\w+)", section(DJANGO, "Management commands")))
    missing = sorted(commands - documented)
    assert not missing, (
        f"Management commands (nitro_assistants/management/commands/) missing from 'Management "
        f"commands' in docs/django.md: {missing}. Add: - `manage.py <name> [options]`: what it does"
    )
    listed = set(re.findall(r"`(nitro_assistants_\w+)`", section(README, "Install into a project")))
    assert listed == commands, (
        f"README.md 'Install into a project' lists the management commands {sorted(listed)}; "
        f"nitro_assistants/management/commands/ has {sorted(commands)}"
    )
    mentioned = {
        name for name in re.findall(r"manage\.py (\w+)", docs_text()) if name.startswith("nitro")
    }
    unknown = sorted(mentioned - commands)
    assert not unknown, f"The docs name management commands that do not exist: {unknown}"


# -- system checks --------------------------------------------------------------------------------

CHECK_ID = re.compile(r"nitro_assistants\.[CEWI]\d{3}")


def test_every_check_id_is_documented_and_every_documented_one_exists() -> None:
    ids = set(CHECK_ID.findall((PACKAGE / "checks.py").read_text()))
    assert ids, "found no check id in nitro_assistants/checks.py"
    table = {
        names[0] for row in table_rows(section(DJANGO, "Settings")) if (names := code_names(row[0]))
    }
    missing = sorted(ids - table)
    assert not missing, (
        f"System check ids of nitro_assistants/checks.py missing from the check table under "
        f"'Settings' in docs/django.md: {missing}. Add a row: | `id` | what it catches |"
    )
    unknown = sorted(set(CHECK_ID.findall(docs_text())) - ids)
    assert not unknown, (
        f"The docs name check ids nitro_assistants/checks.py does not have: {unknown}"
    )


# -- URL prefixes and import paths ----------------------------------------------------------------


def prefixes(module: str) -> dict[str, set[str]]:
    pattern = re.compile(rf"path\(\s*\"([^\"]*)\"\s*,\s*include\(\"{re.escape(module)}\"\)")
    found: dict[str, set[str]] = {}
    for path in (*DOCS, ROOT / "reviewsite" / "urls.py"):
        for prefix in pattern.findall(path.read_text()):
            found.setdefault(prefix, set()).add(rel(path))
    return found


def test_one_prefix_for_each_urlconf_everywhere() -> None:
    for module in ("nitro_assistants.urls", "nitro_assistants.api.urls"):
        found = prefixes(module)
        assert len(found) == 1, f"{module} is included under different prefixes: {found}"
    [api_prefix] = prefixes("nitro_assistants.api.urls")
    requests = re.findall(r"^(?:GET|POST) (/\S+)", API.read_text(), re.MULTILINE)
    assert requests, "docs/api.md shows no request"
    wrong = [r for r in requests if not r.startswith(f"/{api_prefix}")]
    assert not wrong, f"docs/api.md requests not under the prefix /{api_prefix}: {wrong}"


def test_classes_the_docs_use_in_code_have_an_import_path() -> None:
    """A name used in a docs code example (``ApiKey.generate(...)``) is imported in the docs."""
    used = {"ApiKey": "nitro_assistants.models"}
    text = docs_text()
    for name, module in used.items():
        assert re.search(rf"from {re.escape(module)} import [^\n]*\b{name}\b", text), (
            f"The docs use {name} but never say where it comes from: add `from {module} import {name}`"
        )


def test_the_sync_finds_what_it_compares() -> None:
    """The readers above find something in the code (a test that compares two empty sets
    cannot fail)."""
    assert len(AppSettings.DEFAULTS) > 10
    assert len(code_tasks()) >= 8 and len(periodic_tasks()) >= 3
    assert len(code_signals()) >= 7
    assert code_commands() >= {"nitro_assistants_sync", "nitro_assistants_sweep"}


def test_the_settings_reference_gives_the_defaults() -> None:
    """Every key of the reference block that has a default shows that default."""
    block = next(
        b
        for b in all_blocks()
        if b.path == DJANGO and dict_keys(b.code, "NITRO_ASSISTANTS") == settings_reference()
    )
    tree = ast.parse(block.code)
    assigned = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign))
    assert isinstance(assigned.value, ast.Dict)
    shown = {
        k.value: ast.literal_eval(v)
        for k, v in zip(assigned.value.keys, assigned.value.values, strict=True)
        if isinstance(k, ast.Constant)
    }
    required = {"BASE_URL", "DEFINITIONS"}  # no usable default: the reference shows an example
    wrong = {
        key: {"docs": shown[key], "conf.py": default}
        for key, default in AppSettings.DEFAULTS.items()
        if key not in required and key in shown and shown[key] != default
    }
    assert not wrong, (
        f"The NITRO_ASSISTANTS reference in docs/django.md shows values that are not the defaults "
        f"of nitro_assistants/conf.py AppSettings.DEFAULTS: {wrong}"
    )


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, in_fence = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and (heading := re.match(r"#+ (.*)", line)):
            found.add(slug(heading.group(1)))
    return found


def test_links_between_the_docs_resolve() -> None:
    broken = []
    for path in [*DOCS, ROOT / "docs" / "benchmarks.md"]:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{rel(path)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{rel(path)}: {target} (no such heading)")
    assert not broken, f"Links that lead nowhere: {broken}"


# -- the API's error codes ------------------------------------------------------------------------


def raised_codes() -> set[str]:
    """The codes the API's views answer with (``ApiError(status, "code", ...)``)."""
    source = "\n".join(p.read_text() for p in (PACKAGE / "api").glob("*.py"))
    return set(re.findall(r'ApiError\(\s*\d+,\s*"(\w+)"', source))


def test_the_error_table_lists_every_code_the_api_answers_with() -> None:
    from nitro_assistants.api.errors import CODES

    documented = {
        names[0] for row in table_rows(section(API, "Errors")) if (names := code_names(row[1]))
    }
    raised = raised_codes()
    assert {"invalid_json", "invalid_query", "conflict"} <= raised, raised
    missing = sorted(raised - documented)
    assert not missing, f"{rel(API)} 'Errors' does not list the codes {missing}: add a row each"
    unknown = sorted(documented - set(CODES))
    assert not unknown, f"{rel(API)} 'Errors' lists codes the API does not have: {unknown}"


# -- what a host project writes its code from (issue 40, item 16) ---------------------------------

GOVERNANCE = ROOT / "docs" / "governance.md"


def first_names(text: str) -> set[str]:
    """The backticked names of the first cell of every table row in ``text``."""
    return {name for row in table_rows(text) for name in code_names(row[0])}


def model_fields(model: type[Any]) -> set[str]:
    return {f.name for f in model._meta.concrete_fields if f.name != "id"}


def test_the_rule_field_table_names_every_field_of_a_rule() -> None:
    from nitro_assistants.models import Policy

    rules_section = section(GOVERNANCE, "Rules")
    assert first_names(rules_section) == model_fields(Policy), (
        f"{rel(GOVERNANCE)} 'Rules': the field table differs from Policy's fields"
    )
    deadline = next(r for r in table_rows(rules_section) if "deadline" in code_names(r[0]))
    assert "duration" in deadline[1] and "timedelta" in deadline[1], deadline


def test_the_rule_argument_of_the_governance_signals_lists_its_keys() -> None:
    from nitro_assistants.policy_rules import Handling

    keys = {f.name for f in dataclasses.fields(Handling)}
    assert {"rule_name", "rule_id", "rule_version"} <= keys
    documented = first_names(section(GOVERNANCE, "Signals and events"))
    assert documented == keys, (
        f"{rel(GOVERNANCE)} 'Signals and events': the `rule` keys differ from Handling's fields: "
        f"missing {sorted(keys - documented)}, unknown {sorted(documented - keys)}"
    )
    for path in (README, DJANGO):  # the signal tables name the keys, not "name, id, version"
        rows = [r for r in table_rows(section(path, "Signals")) if "`review_auto_decided`" in r[0]]
        assert rows and "`rule_name`, `rule_id`, `rule_version`" in rows[0][2], rel(path)


def test_a_deadline_is_documented_as_setting_the_handlings_due_at() -> None:
    deadlines = section(GOVERNANCE, "Deadlines")
    assert "`ReviewHandling`" in deadlines and "`due_at`" in deadlines
    assert "the review's `due_at`" not in deadlines  # Review has no due_at


@pytest.mark.parametrize("name", ["ReviewHandling", "Approval", "Claim", "Notification", "Event"])
def test_each_model_a_host_reads_has_its_fields_documented(name: str) -> None:
    from nitro_assistants import models

    documented = first_names(section(DJANGO, f"`{name}`"))
    fields = model_fields(getattr(models, name))
    assert documented == fields, (
        f"{rel(DJANGO)} '`{name}`': missing {sorted(fields - documented)}, "
        f"unknown {sorted(documented - fields)}"
    )


@pytest.mark.django_db
def test_the_api_lists_answer_with_keys_the_docs_name(client: Client) -> None:
    from nitro_assistants import services
    from tests.admin.conftest import make_tool_review

    user = get_user_model().objects.create_superuser("docs", "docs@example.com", "x")
    client.force_login(user)
    review = make_tool_review()
    services.decide(review, user, {"tool_calls": [{"id": "call_1", "action": "approve"}]})
    session = review.thread.thread_id
    reviews = client.get("/nitro/api/reviews", {"status": "all"}).json()
    events = client.get(f"/nitro/api/sessions/{session}/events").json()
    interactions = client.get(f"/nitro/api/sessions/{session}/interactions").json()
    assert reviews["items"] and events["items"], (reviews, events)
    named = set(re.findall(r'"(\w+)"', API.read_text())) | set(
        re.findall(r"`(\w+)`", API.read_text())
    )
    keys = {*reviews, *events, *interactions, *events["items"][0]}
    assert keys <= named, f"{rel(API)} does not name the list keys {sorted(keys - named)}"
    listing = section(API, "Listing reviews")
    assert "`items`" in listing and "`next`" in listing


# -- supported versions (issue 35) ----------------------------------------------------------------


def test_the_supported_versions_are_the_same_in_the_readme_pyproject_and_the_code() -> None:
    """README "Supported versions", the classifiers, the tested pin, the compiled reads' guard
    and check E018 say the same Python, Django and databases."""
    rows = {cells[0]: cells[1] for cells in table_rows(section(README, "Supported versions"))}
    assert set(rows) == {"Python", "Django", "PostgreSQL", "SQLite"}, rows
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    classifiers = project["classifiers"]
    pythons = [
        c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r".*Python :: 3\.\d+", c)
    ]
    djangos = [c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r".*Django :: \d.*", c)]
    assert rows["Python"] == ", ".join(pythons), (rows["Python"], pythons)
    assert rows["Django"] == ", ".join(djangos), (rows["Django"], djangos)
    assert djangos == [".".join(map(str, release)) for release in VERIFIED_DJANGO]
    assert project["requires-python"] == f">={pythons[0]}"
    assert f'"Django>={djangos[0]}"' in (ROOT / "pyproject.toml").read_text()
    pinned = re.search(r"^Django==(\d+\.\d+)\.", (ROOT / "requirements.txt").read_text(), re.M)
    assert pinned is not None and pinned.group(1) in djangos
    assert set(SUPPORTED_VENDORS.values()) == {"PostgreSQL", "SQLite"}
