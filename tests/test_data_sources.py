"""``tests/data/SOURCES.md`` stays true: every row's size and checksum match its file or folder, every
file in ``tests/data`` and in ``traceflow/examples`` (the packaged agent logs, which the tests read in
place) has a row, and ``tests/data`` holds no second copy of a packaged example.

Checksums are computed here with ``hashlib`` and ``gzip`` as SOURCES.md describes them (of the unpacked
content; a folder's is the sha256 of its sorted ``sha256sum`` listing), independent of conftest's copy.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STORED = REPO / "tests" / "data"
SOURCES = STORED / "SOURCES.md"
#: The packaged examples' rows name them from the repository root (``traceflow/examples/NAME``).
PACKAGED = "traceflow/examples/"
PACKAGED_EXAMPLES = REPO / PACKAGED

ROW = re.compile(r"^\| `([^`]+)` \|.*\| ([\d,]+) \| ([0-9a-f]{64}) \|$")
LISTED = re.compile(r"^([0-9a-f]{64})  (\S+)$")


def content(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


def unpacked_name(relative: str) -> str:
    return relative.removesuffix(".gz")


def listing(folder: Path) -> list[tuple[str, bytes]]:
    """(unpacked path relative to the folder, content) per file, sorted by that path."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sorted((unpacked_name(p.relative_to(folder).as_posix()), content(p)) for p in files)


def sha256sum_text(items: list[tuple[str, bytes]]) -> str:
    return "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in items)


def rows() -> dict[str, tuple[int, str]]:
    """Path -> (bytes, sha256) for every table row of SOURCES.md."""
    out: dict[str, tuple[int, str]] = {}
    for line in SOURCES.read_text().splitlines():
        if m := ROW.match(line):
            assert m.group(1) not in out, f"{m.group(1)} has two rows"
            out[m.group(1)] = (int(m.group(2).replace(",", "")), m.group(3))
    return out


ROWS = rows()


def test_sources_lists_the_data() -> None:
    assert len(ROWS) >= 20
    some = {"weka_cc_traces/", "mooncake_conversation_trace.jsonl.gz", "claude-code-otlp/json-full/"}
    assert some <= set(ROWS)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_row_matches_its_file_or_folder(name: str) -> None:
    size, digest = ROWS[name]
    path = REPO / name if name.startswith(PACKAGED) else STORED / name
    if name.endswith("/"):
        assert path.is_dir(), f"{name} is not a folder in tests/data"
        items = listing(path)
        got_size = sum(len(data) for _, data in items)
        got_digest = hashlib.sha256(sha256sum_text(items).encode()).hexdigest()
    else:
        assert path.is_file(), f"{name} is not a file in tests/data or traceflow/examples"
        data = content(path)
        got_size, got_digest = len(data), hashlib.sha256(data).hexdigest()
    assert (got_size, got_digest) == (size, digest), f"SOURCES.md is out of date for {name}"


def test_every_file_has_a_row() -> None:
    folders = [name for name in ROWS if name.endswith("/")]
    missing = []
    for path in sorted(STORED.rglob("*")):
        relative = path.relative_to(STORED).as_posix()
        if not path.is_file() or path == SOURCES:
            continue
        if relative not in ROWS and not any(relative.startswith(f) for f in folders):
            missing.append(relative)
    assert missing == [], "files in tests/data without a row in SOURCES.md"


def test_per_file_checksums_of_the_kv_cache_tester_traces() -> None:
    text = SOURCES.read_text()
    block = text[text.index("```sha256\n") + len("```sha256\n") :]
    block = block[: block.index("```")]
    listed = [LISTED.match(line) for line in block.splitlines()]
    assert all(listed)
    got = listing(STORED / "weka_cc_traces")
    assert len(got) == 36
    assert block == sha256sum_text(got)


def test_every_packaged_example_has_a_row() -> None:
    packaged = sorted(p.name for p in PACKAGED_EXAMPLES.iterdir())
    assert packaged == [
        "claude-otlp-logs.json",
        "claude-transcript.jsonl",
        "codex-otlp-logs.json",
        "codex-rollout.jsonl",
        "gemini-chat.jsonl",
        "gemini-otlp-logs.json",
    ]
    assert sorted(name for name in ROWS if name.startswith(PACKAGED)) == [PACKAGED + n for n in packaged]


def test_tests_data_holds_no_copy_of_a_packaged_example() -> None:
    """The packaged examples are the one copy: the tests read them in ``traceflow/examples``."""
    packaged = {p.read_bytes(): p.name for p in PACKAGED_EXAMPLES.iterdir()}
    sizes = {len(data) for data in packaged}
    copies = [
        f"{path.relative_to(STORED).as_posix()} (= {packaged[path.read_bytes()]})"
        for path in sorted(STORED.rglob("*"))
        if path.is_file() and path.stat().st_size in sizes and path.read_bytes() in packaged
    ]
    assert copies == [], "read traceflow/examples (tests.conftest.EXAMPLES) instead of a copy in tests/data"
