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

AGENT_LOGS = STORED / "agent-logs"


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
    "opencode": lambda: (
        "storage/message/ses_6a1f0c2e3ffeY2qk0Ugq1Zc9Ab/msg_a02.json",
        (AGENT_LOGS / "opencode/storage/message/ses_6a1f0c2e3ffeY2qk0Ugq1Zc9Ab/msg_a02.json").read_bytes(),
    ),
    "qwen": lambda: ("chats/s.jsonl", next((AGENT_LOGS / "qwen").rglob("4c1e2a7b-*.jsonl")).read_bytes()),
    "amp": lambda: ("threads/T-1.json", next((AGENT_LOGS / "amp").rglob("T-3f1b2c4d-*.json")).read_bytes()),
    "copilot": lambda: (
        "session-state/s/events.jsonl",
        next((AGENT_LOGS / "copilot").rglob("0d6f3a1e-*/events.jsonl")).read_bytes(),
    ),
    "kimi": lambda: (
        "sessions/g/s/wire.jsonl",
        next((AGENT_LOGS / "kimi").rglob("5e0c8a2b-*/wire.jsonl")).read_bytes(),
    ),
    "codebuff": lambda: (
        "projects/p/chats/c/chat-messages.json",
        next((AGENT_LOGS / "codebuff").rglob("2026-03-18T*/chat-messages.json")).read_bytes(),
    ),
    "pi": lambda: ("p/t_s.jsonl", next((AGENT_LOGS / "pi").rglob("*_0b8e5a4c-*.jsonl")).read_bytes()),
    "openclaw": lambda: (
        "agents/main/sessions/s.jsonl",
        next((AGENT_LOGS / "openclaw").rglob("a7c3e1f0-*.jsonl")).read_bytes(),
    ),
    "grok": lambda: (
        "sessions/p/s/updates.jsonl",
        next((AGENT_LOGS / "grok").rglob("0197e0f3-*/updates.jsonl")).read_bytes(),
    ),
    "droid": lambda: (
        "sessions/w/s.settings.json",
        next((AGENT_LOGS / "droid").rglob("5b0c8e61-*.settings.json")).read_bytes(),
    ),
}
#: Importers of SQLite databases only, which the agents never compress (kilo's ``kilo.db``).
DATABASES = {"kilo", "goose", "hermes", "zcode", "antigravity"}

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
    assert (
        set(SAMPLES) == set(importers.names()) - {"clickhouse-otel"} - DATABASES
    )  # Parquet: compressed inside


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


# Bounded memory on hostile input (issue 33): a decompression bomb, a line that never ends and a
# document past its limit are refused with exit 2 naming the file, the import's peak memory well
# under 512 MiB throughout (measured in a child process: its own peak, nothing of pytest's).

_PEAK = (
    "import json, resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024\n"
    "print(json.dumps({'code': r.returncode, 'err': r.stderr, 'peak': peak}))\n"
)
PEAK_BOUND = 512 << 20


def _import_peak(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """(exit status, stderr, peak RSS in bytes) of ``traceflow import ARGS`` in a fresh process."""
    import os
    import subprocess
    import sys

    environ = {**os.environ, "TRACEFLOW_DATA": str(tmp_path / "lake"), "TRACEFLOW_CACHE": "0", **(env or {})}
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "traceflow", "import", *args, "--jobs", "1"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=True,
    )
    got = json.loads(out.stdout)
    return got["code"], got["err"], got["peak"]


def _zstd_of_newlines(path: Path, n_bytes: int) -> None:
    """A Zstandard file of ``n_bytes`` newlines, compressed as a stream (2 GiB -> about 67 kB)."""
    block = b"\n" * (1 << 20)
    with open(path, "wb") as fh, zstandard.ZstdCompressor(level=1).stream_writer(fh) as w:
        for _ in range(n_bytes // len(block)):
            w.write(block)


def _gzip_without_newline(path: Path, n_mib: int) -> None:
    """A gzip file of ``n_mib`` MiB without a newline: one member repeated (multi-member gzip reads as
    their concatenation), each MiB 4 KiB of varied bytes repeated, so it expands about 60 times."""
    import random

    rng = random.Random(33)
    pattern = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789{}:,") for _ in range(4096))
    member = gzip.compress(pattern * 256, compresslevel=6)
    with open(path, "wb") as fh:
        for _ in range(n_mib):
            fh.write(member)


@pytest.fixture(scope="module")
def zstd_bomb(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("bomb") / "bomb.zst"
    _zstd_of_newlines(path, 2 << 30)
    return path.read_bytes()


@pytest.mark.parametrize("importer", ["mooncake", "kvcache-tester"])
def test_a_zstd_bomb_is_refused_in_bounded_memory(importer: str, zstd_bomb: bytes, tmp_path: Path) -> None:
    path = tmp_path / ("trace_0001.json.zst" if importer == "kvcache-tester" else "bomb.jsonl.zst")
    path.write_bytes(zstd_bomb)
    assert path.stat().st_size < 200_000  # 2 GiB of newlines: the bomb of the issue
    code, err, peak = _import_peak(tmp_path, importer, str(path))
    assert code == 2, err
    assert str(path) in err and "TRACEFLOW_MAX_EXPANSION" in err and "Traceback" not in err
    assert peak < PEAK_BOUND, peak


def test_a_gzip_line_that_never_ends_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "endless.jsonl.gz"
    _gzip_without_newline(path, 400)
    code, err, peak = _import_peak(tmp_path, "mooncake", str(path))
    assert code == 2, err
    assert str(path) in err and "TRACEFLOW_MAX_LINE_BYTES" in err and "Traceback" not in err
    assert peak < PEAK_BOUND, peak


def test_a_plain_file_without_a_newline_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "endless.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB of zero bytes (sparse), not one newline
    code, err, peak = _import_peak(tmp_path, "mooncake", str(path))
    assert code == 2, err
    assert str(path) in err and "TRACEFLOW_MAX_LINE_BYTES" in err and "Traceback" not in err
    assert peak < PEAK_BOUND, peak


def test_a_whole_file_document_past_its_limit_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "traces" / "trace_0001.json"
    plain.parent.mkdir()
    doc = (TESTDATA / "weka_cc_traces" / "trace_0265.json").read_bytes()
    plain.write_bytes(doc)
    packed = tmp_path / "packed" / "trace_0002.json.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(doc))
    limit = {"TRACEFLOW_MAX_DOCUMENT_BYTES": str(len(doc) - 1)}
    for path in (plain, packed):
        code, err, _ = _import_peak(tmp_path, "kvcache-tester", str(path), env=limit)
        assert code == 2, err
        assert str(path) in err and "TRACEFLOW_MAX_DOCUMENT_BYTES" in err and f"now {len(doc) - 1}" in err
    code, err, _ = _import_peak(
        tmp_path, "kvcache-tester", str(packed), env={"TRACEFLOW_MAX_DOCUMENT_BYTES": str(len(doc))}
    )
    assert code == 0, err  # exactly at the limit: read


def test_lines_up_to_the_limit_are_read_across_blocks(tmp_path: Path) -> None:
    """A line longer than a read step but within the limit is joined whole; one byte past, refused."""
    from traceflow.importers import run as run_mod
    from traceflow.importers.run import FilePlan, _chunks
    from traceflow.paths import InputTooLarge

    lines = [b"a" * 10 + b"\n", b"b" * 3000 + b"\n", b"c" * 5 + b"\n"]
    path = tmp_path / "x.jsonl.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines)))
    old = run_mod._CHUNK_BYTES
    run_mod._CHUNK_BYTES = 1000
    try:
        for packed in (True, False):
            target = path if packed else tmp_path / "x.jsonl"
            if not packed:
                target.write_bytes(b"".join(lines))
            p = FilePlan(str(target), 0, 1, {}, target.stat().st_size, 0, "", 0)
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TRACEFLOW_MAX_LINE_BYTES", "3001")
                assert b"".join(d for d, _ in _chunks(p, False)) == b"".join(lines)
                mp.setenv("TRACEFLOW_MAX_LINE_BYTES", "3000")
                with pytest.raises(InputTooLarge, match="from byte 11"):
                    list(_chunks(p, False))
    finally:
        run_mod._CHUNK_BYTES = old
