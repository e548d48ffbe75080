"""MkDocs hook: the command reference (``reference.md``) generated from the CLI itself at build time.

:func:`reference` walks the click tree behind ``traceflow`` (every command the app registers, groups
and their sub-commands included) and writes, per command, its ``--help`` text: usage, the help and
every option with its type and default. A command added to ``traceflow/cli/app.py`` appears here with
no one editing the docs. Each command links to the page section that explains it (the first heading
of a page under ``docs/`` naming ```traceflow NAME``), when there is one. ``tests/test_docs.py`` checks
the output.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: The line of ``reference.md`` the generated reference replaces.
MARKER = "<!-- cli-reference -->"
WIDTH = 100


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's ``toc``) gives a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def sections(docs: Path) -> dict[str, str]:
    """Command path (``"import"``, ``"prices update"``) -> ``page.md#anchor`` of the first heading that
    names ```traceflow COMMAND``` on a page in ``docs`` (``reference.md`` itself left out)."""
    found: dict[str, str] = {}
    for page in sorted(docs.glob("*.md")):
        if page.name == "reference.md":
            continue
        fence = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("```"):
                fence = not fence
            if fence or not re.match(r"^#{1,4} ", line):
                continue
            for name in re.findall(r"`traceflow ([a-z][a-z-]*(?: [a-z][a-z-]*)?)", line):
                found.setdefault(name, f"{page.name}#{_slug(line.lstrip('#'))}")
    return found


def commands() -> list[tuple[str, Any]]:
    """Every ``traceflow`` command as (path, click command), in ``--help`` order, groups' sub-commands
    after their group."""
    import typer.main

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from traceflow.cli.app import app, register_all

    register_all()
    root = typer.main.get_command(app)
    out: list[tuple[str, Any]] = []

    def walk(prefix: str, group: Any) -> None:
        # a group is what has sub-commands (typer 0.28 carries its own copy of click: no isinstance)
        for name, command in group.commands.items():
            path = f"{prefix} {name}".strip()
            out.append((path, command))
            if hasattr(command, "commands"):
                walk(path, command)

    walk("", root)
    return out


def help_text(path: str, command: Any) -> str:
    """The command's plain ``--help`` (click's own formatter, not typer's rich boxes) at ``WIDTH`` columns."""
    ctx = command.context_class(
        command, info_name=f"traceflow {path}", terminal_width=WIDTH, max_content_width=WIDTH
    )
    formatter = ctx.make_formatter()
    # click's Command.format_help (whichever copy of click typer uses): usage, help, options
    plain = next(
        c for c in type(command).__mro__ if c.__name__ == "Command" and c.__module__.endswith("click.core")
    )
    plain.format_help(command, ctx, formatter)
    return formatter.getvalue().rstrip()


def reference(docs: Path = REPO / "docs") -> str:
    """The generated reference: a table of the commands, then one section per command."""
    where = sections(docs)
    listed = commands()
    lines = ["| command | what it does |", "|---|---|"]
    for path, command in listed:
        first = (command.help or "").strip().split("\n\n")[0].replace("\n", " ").replace("|", "\\|")
        lines.append(f"| [`traceflow {path}`](#{_slug('traceflow ' + path)}) | {first} |")
    for path, command in listed:
        lines += ["", f"## `traceflow {path}`", ""]
        if path in where:
            lines += [f"Explained in [{where[path].split('#')[0]}]({where[path]}).", ""]
        lines += ["```text", help_text(path, command), "```"]
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: put the generated reference in place of ``MARKER`` on ``reference.md``."""
    if page.file.src_uri == "reference.md":
        if MARKER not in markdown:
            raise ValueError(f"docs/reference.md lost its {MARKER} line")
        return markdown.replace(MARKER, reference(Path(config["docs_dir"])))
    return markdown
