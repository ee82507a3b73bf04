"""The example project: its one-command demo, its compose stack and its settings reference."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from nitro_assistants.testing.launchers import free_port

ROOT = Path(__file__).resolve().parent.parent


def test_demo_check_runs_end_to_end() -> None:
    """`make demo CHECK=1`: real assistant server, seeded reviews in the admin, one decided."""
    # A password that starts with "-" (token_urlsafe makes one now and then) must reach the
    # commands as a value, not as an option.
    env = {**os.environ, "WEB_PORT": str(free_port()), "DEMO_PASSWORD": "-dash-first-9X"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        ["bash", "scripts/demo.sh", "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "login: admin / " in done.stdout
    assert "demo check passed: 4 seeded reviews listed" in done.stdout


def test_compose_file_names_every_service_with_health_checks_and_restarts() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"db", "redis", "assistants", "web", "worker", "beat"}
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no health check"
        # A process that exits is started again (a worker can, when Redis goes away).
        assert service.get("restart") == "unless-stopped", f"{name} is not restarted"
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown {dependency}"
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0]
            if not source.startswith(("/", ".")):
                assert source in compose["volumes"], f"{name} uses undeclared volume {source}"
    assert set(services["web"]["depends_on"]) == {"db", "redis", "assistants"}
    assert services["web"]["environment"]["ASSISTANTS_URL"].endswith("http://assistants:2024}")


def test_env_example_lists_every_variable_the_site_reads() -> None:
    settings = (ROOT / "reviewsite" / "settings.py").read_text()
    read = set(re.findall(r'env(?:\.\w+)?\(\s*"([A-Z_]+)"', settings))
    listed = {
        line.split("=", 1)[0]
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert read, "the pattern found no variables"
    assert read <= listed, f"missing from .env.example: {sorted(read - listed)}"


@pytest.mark.parametrize("name", ["delivery_failed", "delivery_pending"])
def test_example_receivers_are_connected(name: str) -> None:
    from nitro_assistants import signals

    signal = getattr(signals, name)
    import reviewsite.receivers  # noqa: F401

    assert any(entry[0][0] == f"reviewsite.{name}" for entry in signal.receivers)
