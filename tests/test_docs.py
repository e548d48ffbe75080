"""The README documents every command and setting, and CI runs the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

import typer.main

from traceflow.cli.app import app, register_all
from traceflow.config import SETTINGS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_every_command_is_documented() -> None:
    register_all()
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    missing = [name for name in commands if f"traceflow {name}" not in README]
    assert missing == []


def test_every_setting_is_documented() -> None:
    assert [s.env for s in SETTINGS if f"`{s.env}`" not in README] == []


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    test_cmd = next(b.strip() for b in blocks if "pytest" in b)
    ci = (REPO / ".ci" / "run").read_text()
    assert test_cmd in ci


def test_readme_has_exactly_two_setup_commands() -> None:
    section = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"```bash\n", section)) == 2


def test_one_script_installs_the_outside_tools_and_the_readme_says_what_skips_without_it() -> None:
    script = (REPO / "scripts" / "install_test_tools.sh").read_text()
    for needed in ("install_claude_code.sh", "install_aiperf.sh", "chromium-driver"):
        assert needed in script
    assert "bash scripts/install_test_tools.sh" in (REPO / ".ci" / "run").read_text()
    setup = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    assert "bash scripts/install_test_tools.sh" in setup
    for test_file in ("test_claude_code_e2e.py", "test_aiperf_consumer.py", "test_report_browser.py"):
        assert f"tests/{test_file}" in setup and (REPO / "tests" / test_file).exists()
    assert "skips" in setup and "never skips" in setup


def test_every_help_starts_with_a_whole_sentence() -> None:
    """`traceflow --help` lists each command by its first line: one whole sentence, never cut mid-way."""
    register_all()
    group = typer.main.get_command(app)
    assert group.help and "\n" not in group.help.strip() and group.help.strip().endswith(".")
    bad = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        first = (command.help or "").strip().split("\n\n")[0]
        if not first or "\n" in first or not first.endswith(".") or not first[0].isupper():
            bad[name] = first
    assert bad == {}
