"""The manual: the README (what a newcomer needs) and the docs site under ``docs/`` (everything else).

The site builds with warnings as errors (broken links and anchors included), its command reference
is generated from the CLI (``docs/hooks.py``) and lists every command and option, every command and
setting is explained on a page, and CI runs the README's test command.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import typer.main

from traceflow.cli.app import app, register_all
from traceflow.config import SETTINGS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = (REPO / "README.md").read_text()
#: Each page of the site as written (``reference.md`` holds only its introduction until the build).
PAGES = {p.name: p.read_text() for p in sorted(DOCS.glob("*.md"))}
SETUP = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("traceflow_docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def registered() -> dict[str, object]:
    register_all()
    return typer.main.get_command(app).commands  # type: ignore[attr-defined, no-any-return]


def test_every_command_is_explained_on_a_page() -> None:
    """Beyond the generated reference, each command has prose on the page of its area."""
    prose = "\n".join(text for name, text in PAGES.items() if name != "reference.md")
    assert [name for name in registered() if f"traceflow {name}" not in prose] == []
    # ... under a heading that names it, which the reference links to
    assert [name for name in registered() if name not in hooks().sections(DOCS)] == []


def test_the_reference_lists_every_command_with_every_option() -> None:
    docs = hooks()
    text = docs.reference()
    sections = dict(re.findall(r"^## `traceflow ([^`]+)`\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    assert list(sections) == [path for path, _ in docs.commands()]
    assert set(registered()) <= set(sections)
    for path, command in docs.commands():
        body = sections[path]
        assert f"Usage: traceflow {path}" in body, path
        for param in command.params:
            if getattr(param, "hidden", False):  # hidden on purpose (internal switches)
                assert all(opt not in body for opt in getattr(param, "opts", [])), (path, param)
                continue
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert opt in body, (path, opt)
    # the help as the CLI prints it: an option's own words, from the command's definition
    assert "A cache TTL: seconds or 30s, 5m, 1h, 1d (repeatable)." in sections["gaps"]


def test_the_reference_links_each_command_to_the_section_that_explains_it() -> None:
    docs = hooks()
    where = docs.sections(DOCS)
    assert where["serve"] == "collector.md#traceflow-serve"
    assert where["misses"] == "forensics.md#traceflow-misses"
    assert "Explained in [collector.md](collector.md#traceflow-serve)." in docs.reference()


def test_every_setting_is_documented() -> None:
    assert [s.env for s in SETTINGS if f"`{s.env}`" not in PAGES["settings.md"]] == []


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    test_cmd = next(b.strip() for b in blocks if "pytest" in b)
    assert test_cmd == "python3 -m pip install -q -e '.[test]' && python3 -m pytest"
    ci = (REPO / ".ci" / "run").read_text()
    assert test_cmd in ci


def test_readme_has_exactly_two_setup_commands() -> None:
    assert len(re.findall(r"```bash\n", SETUP)) == 2


def test_one_script_installs_the_outside_tools_and_the_readme_says_what_skips_without_it() -> None:
    script = (REPO / "scripts" / "install_test_tools.sh").read_text()
    for needed in ("install_claude_code.sh", "install_aiperf.sh", "chromium-driver"):
        assert needed in script
    assert "bash scripts/install_test_tools.sh" in (REPO / ".ci" / "run").read_text()
    assert "bash scripts/install_test_tools.sh" in SETUP
    for test_file in ("test_claude_code_e2e.py", "test_aiperf_consumer.py", "test_report_browser.py"):
        assert f"tests/{test_file}" in SETUP and (REPO / "tests" / test_file).exists()
    assert "skips" in SETUP and "never skips" in SETUP


def test_readme_is_at_most_250_lines_and_its_first_screen_shows_the_everyday_commands() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:40])
    for command in ("daily", "weekly", "monthly", "session", "blocks --active", "statusline"):
        assert f"traceflow {command}" in first_screen, command


def test_the_getting_started_page_includes_the_readmes_set_up_section() -> None:
    """One copy: ``docs/index.md`` includes the README's section (pymdownx.snippets), never a copy."""
    assert '--8<-- "README.md:setup"' in PAGES["index.md"]
    assert SETUP.count("<!-- --8<-- [start:setup] -->") == 1 and SETUP.count("[end:setup]") == 1
    assert "python3 -m pytest" not in PAGES["index.md"]


def test_the_readmes_links_lead_to_pages_and_headings_that_exist() -> None:
    slug = hooks()._slug
    links = re.findall(r"\]\(([^)#]+)(?:#([^)]+))?\)", README)
    assert len(links) > 10
    for target, anchor in links:
        if target.startswith("http"):
            continue
        path = REPO / target
        assert path.exists(), target
        if anchor:
            headings = [slug(h) for h in re.findall(r"^#{1,6} (.+)$", path.read_text(), flags=re.M)]
            assert anchor in headings, (target, anchor)


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link or anchor, a missing page in the nav, a failing hook
    fails. Skipped only where mkdocs is not installed outside CI (``.ci/run`` sets CI=1)."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI"):
            pytest.fail("mkdocs / mkdocs-material are missing: pip install -e '.[test]' installs them")
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr

    def text(page: str) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", (site / page).read_text()))

    reference = text("reference/index.html")
    assert "Usage: traceflow working-set" in reference and "--max-inflight-bytes" in reference
    assert "python3 -m pip install -q -e '.[test]' && python3 -m pytest" in text("index.html")  # included
    shutil.rmtree(site)


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
