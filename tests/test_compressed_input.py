"""Compressed input (``traceflow.importers.compressed``): every importer reads ``.gz`` and ``.zst`` files,
told by their first bytes, and imports the same rows as from the plain file."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from tests.conftest import EXAMPLES, STORED, TESTDATA
from tests.test_import_public_traces import BAILIAN_LINES
from traceflow import importers
from traceflow.importers.compressed import CorruptInput, open_input, plain_path, with_compressed
from traceflow.importers.run import run_import
from traceflow.store.lake import Lake


def _head_lines(path: Path, n: int) -> bytes:
    with open(path, "rb") as fh:
        return b"".join(line for _, line in zip(range(n), fh, strict=False))


#: importer -> (file name under the folder imported, its plain bytes)
SAMPLES: dict[str, Callable[[], tuple[str, bytes]]] = {
    "mooncake": lambda: (
        "mooncake_trace.jsonl",
        _head_lines(TESTDATA / "mooncake_synthetic_trace.jsonl", 300),
    ),
    "azure": lambda: (
        "AzureLLMInferenceTrace_code_2023.csv",
        _head_lines(TESTDATA / "AzureLLMInferenceTrace_code_2023.csv", 300),
    ),
    "bailian": lambda: (
        "qwen_traceA_blksz_16.jsonl",
        "".join(json.dumps(r) + "\n" for r in BAILIAN_LINES).encode(),
    ),
    "burstgpt": lambda: (
        "BurstGPT_1.csv",
        b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        b"5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,API log\n",
    ),
    "tracelab": lambda: (
        "round_trace.jsonl",
        (TESTDATA / "tracelab-example" / "round_trace.jsonl").read_bytes(),
    ),
    "kvcache-tester": lambda: (
        "trace_0265.json",
        (TESTDATA / "weka_cc_traces" / "trace_0265.json").read_bytes(),
    ),
    "claude-code": lambda: ("agent-a1b2.jsonl", (EXAMPLES / "claude-transcript.jsonl").read_bytes()),
    "codex": lambda: (
        "rollout-2025-10-01T10-00-00-0199a0b0-0000-7000-8000-000000000001.jsonl",
        (EXAMPLES / "codex-rollout.jsonl").read_bytes(),
    ),
    "gemini": lambda: ("chats/session-1.jsonl", (EXAMPLES / "gemini-chat.jsonl").read_bytes()),
    "otlp-json": lambda: ("claude-otlp-logs.json", (EXAMPLES / "claude-otlp-logs.json").read_bytes()),
}

COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "plain": lambda b: b,
    "gz": gzip.compress,
    "zst": lambda b: zstandard.ZstdCompressor().compress(b),
}


def _rows(lake: Lake, path: Path) -> dict[str, list[str]]:
    """Each table's rows (as text, the file's own path, which names its folder, as ``<file>``)."""
    con = lake.connect()
    out = {}
    for table in ("requests", "events"):
        rows = con.execute(f"SELECT * EXCLUDE (ingested_at) FROM {table}").fetchall()
        out[table] = sorted(repr(row).replace(str(path), "<file>") for row in rows)
    return out


def _import(tmp: Path, source: str, kind: str) -> tuple[dict[str, list[str]], int]:
    name, data = SAMPLES[source]()
    folder = tmp / "in"  # one folder for each kind in turn: ids that hash a file's path see the same one
    shutil.rmtree(folder, ignore_errors=True)
    path = folder / (name if kind == "plain" else f"{name}.{kind}")
    path.parent.mkdir(parents=True)
    path.write_bytes(COMPRESS[kind](data))
    lake = Lake(tmp / f"lake-{kind}")
    lake.ensure()
    summary = run_import(lake, importers.get(source), [folder], jobs=1)
    assert summary.files_seen == 1, "the folder's compressed file is found by its name"
    assert not summary.errors
    return _rows(lake, path), summary.rows["requests"] + summary.rows["events"]


def test_every_importer_has_a_sample() -> None:
    assert set(SAMPLES) == set(importers.names()) - {"clickhouse-otel"}  # Parquet: compressed inside


@pytest.mark.parametrize("kind", ["gz", "zst"])
@pytest.mark.parametrize("source", sorted(SAMPLES))
def test_compressed_file_imports_the_same_rows_as_the_plain_one(
    source: str, kind: str, tmp_path: Path
) -> None:
    plain, n_plain = _import(tmp_path, source, "plain")
    packed, n_packed = _import(tmp_path, source, kind)
    assert n_plain > 0
    assert n_packed == n_plain
    assert packed == plain  # every column, event_id included: a compressed copy of a file adds nothing


def test_import_mooncake_of_the_repositorys_own_gz(
    cli: Callable[..., tuple[int, str, str]], lake: Lake
) -> None:
    """The issue's case: ``import mooncake mooncake_*.jsonl.gz`` failed with "invalid JSON (str is not
    valid UTF-8...)"; it imports the same requests as the unpacked file."""
    code, out, err = cli(
        "import", "mooncake", str(STORED / "mooncake_synthetic_trace.jsonl.gz"), "--format", "json"
    )
    assert code == 0, err
    plain_lines = sum(
        1 for line in (TESTDATA / "mooncake_synthetic_trace.jsonl").read_bytes().splitlines() if line
    )
    assert json.loads(out)["rows"]["requests"] == plain_lines
    packed = (
        lake.connect()
        .execute("SELECT event_id, cold_input_tokens FROM requests ORDER BY event_id")
        .fetchall()
    )
    other = Lake(lake.root.parent / "plain")
    other.ensure()
    run_import(other, importers.get("mooncake"), [TESTDATA / "mooncake_synthetic_trace.jsonl"], jobs=1)
    assert (
        packed
        == other.connect()
        .execute("SELECT event_id, cold_input_tokens FROM requests ORDER BY event_id")
        .fetchall()
    )


def test_compression_is_told_by_content_not_name(lake: Lake, tmp_path: Path) -> None:
    data = _head_lines(TESTDATA / "mooncake_synthetic_trace.jsonl", 50)
    misnamed = tmp_path / "trace.jsonl"  # gzip bytes under a plain name
    misnamed.write_bytes(gzip.compress(data))
    assert run_import(lake, importers.get("mooncake"), [misnamed]).rows["requests"] == 50
    plain_gz = tmp_path / "other.jsonl.zst"  # plain bytes under a compressed name
    plain_gz.write_bytes(data)
    assert run_import(lake, importers.get("mooncake"), [plain_gz]).rows["requests"] == 50


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_multi_member_files_read_as_their_concatenation(kind: str, tmp_path: Path) -> None:
    data = b"".join(b'{"n": %d}\n' % i for i in range(1000))
    path = tmp_path / f"x.jsonl.{kind}"
    path.write_bytes(COMPRESS[kind](data[:3001]) + COMPRESS[kind](data[3001:]))
    with open_input(path) as fh:
        assert b"".join(iter(lambda: fh.read(777), b"")) == data


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_truncated_file_is_one_clear_error(
    kind: str, cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    whole = COMPRESS[kind](_head_lines(TESTDATA / "mooncake_synthetic_trace.jsonl", 2000))
    path = tmp_path / f"cut.jsonl.{kind}"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CorruptInput), open_input(path) as fh:
        fh.read()
    code, _, err = cli("import", "mooncake", str(path))
    assert code == 2
    assert str(path) in err and "truncated or corrupt" in err


def test_names() -> None:
    assert with_compressed((".jsonl",)) == (".jsonl", ".jsonl.gz", ".jsonl.zst")
    assert plain_path(Path("a/agent-1.jsonl.zst")) == Path("a/agent-1.jsonl")
    assert plain_path(Path("a/x.gz")).name == "x"
    assert plain_path(Path("a/.gz")).name == ".gz"


def test_grown_compressed_file_is_read_again_without_duplicates(lake: Lake, tmp_path: Path) -> None:
    lines = _head_lines(TESTDATA / "mooncake_synthetic_trace.jsonl", 60).splitlines(keepends=True)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(lines[:40])))
    assert run_import(lake, importers.get("mooncake"), [path]).rows["requests"] == 40
    with open(path, "ab") as fh:  # a second gzip member appended
        fh.write(gzip.compress(b"".join(lines[40:])))
    run_import(lake, importers.get("mooncake"), [path])
    assert lake.connect().execute("SELECT count(*) FROM requests").fetchone() == (60,)


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_a_fresh_compressed_csv_keeps_its_last_row_without_a_newline(
    kind: str, lake: Lake, tmp_path: Path
) -> None:
    """A plain file's unterminated last row waits until the file has settled (it may be being
    written); a compressed file is written whole, so its last row counts at once."""
    text = (
        b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        b"5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,API log"
    )
    path = tmp_path / f"BurstGPT_1.csv.{kind}"
    path.write_bytes(COMPRESS[kind](text))
    assert run_import(lake, importers.get("burstgpt"), [path]).rows["requests"] == 2
