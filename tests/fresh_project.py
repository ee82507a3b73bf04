"""A fresh host project, as a user makes one: ``django-admin startproject`` with nitro_assistants
added to it, driven by ``manage.py`` in a subprocess of the Python it is given."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# What a host needs to add to a fresh project's settings (the README's quick start).
SETTINGS = """
# Before the admin: its admin/base_site.html adds the stop banner to every admin page.
INSTALLED_APPS.insert(INSTALLED_APPS.index("django.contrib.admin"), "nitro_assistants")
NITRO_ASSISTANTS = {
    "BASE_URL": "http://127.0.0.1:2024",
    "DEFINITIONS": {"support": {"api_key": "key", "assistant_id": "support"}},
}
STATIC_ROOT = BASE_DIR / "static"
"""

# Celery's "First steps with Django" layout: <project>/celery.py, imported by the package.
CELERY_MODULE = """import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "{name}.settings")

app = Celery("{name}")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""
CELERY_IMPORT = 'from .celery import app as celery_app\n\n__all__ = ("celery_app",)\n'


@dataclass
class Project:
    root: Path
    name: str
    python: Path
    env: dict[str, str]

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), "manage.py", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def add_celery_app(self) -> None:
        package = self.root / self.name
        (package / "celery.py").write_text(CELERY_MODULE.format(name=self.name))
        (package / "__init__.py").write_text(CELERY_IMPORT)


def clean_environ() -> dict[str, str]:
    """This process's environment less what would steer a host elsewhere: pytest-django's
    ``DJANGO_SETTINGS_MODULE`` (manage.py only sets a default), ``PYTHONPATH`` (an installed
    package is imported, not this checkout) and Celery settings given as variables."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH") and not k.startswith("CELERY_")
    }


def start_project(
    where: Path, python: Path, name: str = "host", pythonpath: str | None = None
) -> Project:
    """``django-admin startproject <name>`` in ``where`` with nitro_assistants installed in it,
    run in :func:`clean_environ` (with ``pythonpath`` as ``PYTHONPATH`` when given)."""
    env = clean_environ()
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(python), "-m", "django", "startproject", name, str(where)],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    settings = where / name / "settings.py"
    settings.write_text(settings.read_text() + SETTINGS)
    return Project(root=where, name=name, python=python, env=env)
