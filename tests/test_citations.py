"""Docstrings and comments cite only documents in the repository.

A clone has the code, ``docs/`` and the data notes under ``tests/data``; it has no design notes or
research documents kept elsewhere. So every document a source file names must be a file of this
repository, and a citation of a docs page with an anchor (``docs/lake.md#data-model``) must name a
heading of that page. A section sign (``NAME §3``) must follow a document that exists here.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Where the citations live: the package (collectors/, dashboards/ and queries/ are top-level folders),
#: the tests, the benchmarks, the scripts, the deployment files, CI and the manual.
ROOTS = ["traceflow", "collectors", "dashboards", "queries", "tests", "benchmarks", "scripts", "deploy"]
SUFFIXES = {".py", ".sql", ".toml", ".json", ".sh", ".md", ".yml", ".yaml", ".service", ""}
#: Third-party traces and captures (quoted as published) and git-ignored outputs.
SKIP = ("tests/data", "benchmarks/out", "traceflow/collectors", "traceflow/dashboards", "traceflow/queries")

#: ``docs/NAME.md`` optionally followed by ``#anchor``.
DOCS_CITE = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)(?:#([\w-]+))?")
#: Any ``something.md`` (a path or a bare name).
MD_NAME = re.compile(r"(?<![\w/.-])((?:\.\./|[\w.-]+/)*[\w-]+\.md)\b")
#: A section citation: an upper-case document name, ``.md`` optional, then ``§``.
SECTION = re.compile(r"\b([A-Z][A-Z0-9_]{2,}(?:\.md)?)\s*§")


def files() -> Iterator[Path]:
    for root in ROOTS:
        base = REPO / root
        if not base.exists():
            continue
        for path in sorted(base.rglob("*")):  # traceflow/collectors etc. are links: skipped below
            rel = path.relative_to(REPO).as_posix()
            if path == Path(__file__).resolve():
                continue  # this file spells the forms it looks for
            wanted = path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in rel
            if wanted and not any(rel.startswith(s) for s in SKIP) and path.stat().st_size < 2_000_000:
                yield path
    yield REPO / ".ci" / "run"  # not .ci/cache: the outside tools CI installs
    yield REPO / "README.md"
    yield REPO / "pyproject.toml"
    yield from sorted((REPO / "docs").glob("*.md"))


def text_of(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def anchors(page: Path) -> set[str]:
    spec = importlib.util.spec_from_file_location("traceflow_docs_hooks", REPO / "docs" / "hooks.py")
    assert spec and spec.loader
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    found, fence = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"^#{1,6} ", line):
            found.add(hooks._slug(line.lstrip("#")))
    return found


#: Every markdown file of the repository, by name (a bare ``SOURCES.md`` may name any of them).
MARKDOWN = {p.name for p in REPO.glob("*.md")} | {p.name for p in (REPO / "docs").glob("*.md")}
MARKDOWN |= {p.name for root in ROOTS if (REPO / root).exists() for p in (REPO / root).rglob("*.md")}


def test_docs_pages_cited_exist_with_their_headings() -> None:
    cited: dict[tuple[str, str], list[str]] = {}
    for path in files():
        for page, anchor in DOCS_CITE.findall(text_of(path)):
            cited.setdefault((page, anchor), []).append(path.relative_to(REPO).as_posix())
    assert len(cited) > 30  # the package's docstrings cite the docs pages
    cache: dict[str, set[str]] = {}
    bad = []
    for (page, anchor), where in sorted(cited.items()):
        target = REPO / "docs" / page
        if not target.exists():
            bad.append((f"docs/{page}", where))
        elif anchor and anchor not in cache.setdefault(page, anchors(target)):
            bad.append((f"docs/{page}#{anchor}", where))
    assert bad == []


def test_every_markdown_document_named_is_in_the_repository() -> None:
    bad = []
    for path in files():
        if path.parent == REPO / "docs" and path.suffix == ".md":
            continue  # the pages cite other repositories' files by path, with the repository named
        for name in MD_NAME.findall(text_of(path)):
            local = (path.parent / name).exists() or (REPO / name).exists()
            if not local and Path(name).name not in MARKDOWN:
                bad.append((path.relative_to(REPO).as_posix(), name))
    assert bad == []


def test_no_section_of_a_document_outside_the_repository_is_cited() -> None:
    """The design notes and research documents the code once cited by section (``DESIGN §3``,
    ``AGENT_TELEMETRY_SCHEMAS §7.4``) are not in a clone; their content is in docs/."""
    bad = []
    for path in files():
        for name in SECTION.findall(text_of(path)):
            if (name if name.endswith(".md") else f"{name}.md") not in MARKDOWN:
                bad.append((path.relative_to(REPO).as_posix(), name))
    assert bad == []


def test_the_checks_find_what_they_look_for() -> None:
    assert SECTION.findall("as DESIGN §3 says; KV_TIER_SIZING.md §8") == ["DESIGN", "KV_TIER_SIZING.md"]
    assert MD_NAME.findall("see ../shared/reference/CLAUDE_CODE_REAL_CLIENT.md and SOURCES.md.") == [
        "../shared/reference/CLAUDE_CODE_REAL_CLIENT.md",
        "SOURCES.md",
    ]
    assert DOCS_CITE.findall("(docs/lake.md#data-model; docs/replay.md)") == [
        ("lake.md", "data-model"),
        ("replay.md", ""),
    ]
