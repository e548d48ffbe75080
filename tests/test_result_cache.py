"""The result cache: repeated reports served from ``<data>/v1/_cache/results`` while the lake is unchanged.

Real subprocesses of the installed ``traceflow`` script and of ``python -m traceflow`` over a small
lake. A hit is told apart from a recomputation without timing: either the process imported no DuckDB
(``-X importtime``), or an entry rewritten with other bytes is what gets printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from traceflow.store import result_cache
from traceflow.store.lake import Lake

T0 = 1785585600_000000  # 2026-08-01T12:00Z, in microseconds
HEAVY = ("duckdb", "polars", "pyarrow", "typer")
MIX = ["mix", "--by", "day", "--format", "json"]


def _script() -> list[str]:
    beside = Path(sys.executable).with_name("traceflow")
    found = str(beside) if beside.exists() else shutil.which("traceflow")
    assert found, "the traceflow console script is not installed (pip install -e .)"
    return [found]


def rows(prefix: str, n: int, day: int = 0, output: int = 7) -> list[dict[str, object]]:
    return [
        {
            "event_id": f"{prefix}{i}",
            "source": "test",
            "agent": "claude-code",
            "model": "opus",
            "session_id": "s1",
            "started_at": T0 + day * 86_400_000_000 + i * 1_000_000,
            "cold_input_tokens": 10,
            "cache_read_tokens": 1000,
            "cache_write_tokens": 100,
            "output_tokens": output,
        }
        for i in range(n)
    ]


def settle(lake: Lake) -> None:
    """Age the lake's directories past the racy window, as if the last write was a minute ago."""
    past = time.time_ns() - 60_000_000_000
    for d, _, _ in os.walk(lake.base):
        os.utime(d, ns=(past, past))


def run(
    lake: Lake, *args: str, module: bool = False, importtime: bool = False, **env: str
) -> subprocess.CompletedProcess[bytes]:
    environ = {k: v for k, v in os.environ.items() if k not in ("TRACEFLOW_CACHE", "TRACEFLOW_DATA")}
    environ.update(env)
    if module:
        cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "traceflow"]
    else:
        cmd = _script()
    return subprocess.run(
        [*cmd, *args, "--data", str(lake.root)], capture_output=True, env=environ, timeout=120
    )


def entries(lake: Lake) -> list[Path]:
    d = lake.base / "_cache" / "results"
    return sorted(d.glob("*.bin")) if d.is_dir() else []


def heavy_imports(stderr: bytes) -> list[str]:
    """Top-level packages among the modules ``-X importtime`` says were imported."""
    names = [line.rsplit("|", 1)[-1].strip() for line in stderr.decode().splitlines() if "|" in line]
    return sorted({n.split(".")[0] for n in names if n.split(".")[0] in HEAVY})


def tamper(path: Path, stdout: bytes, signature: str | None = None) -> None:
    """Rewrite an entry (keeping its signature unless given one) so that a hit prints ``stdout``."""
    if signature is None:
        signature = path.read_bytes().split(b"\n", 1)[0].split(b" ")[1].decode()
    path.write_bytes(result_cache._encode(signature, stdout, b""))


def total_output(stdout: bytes) -> int:
    import json

    return sum(day["output_tokens"] for day in json.loads(stdout))


@pytest.fixture
def filled(lake: Lake) -> Lake:
    lake.append("requests", rows("a", 3))
    lake.append("requests", rows("b", 2, day=1))
    settle(lake)
    return lake


def test_a_hit_prints_the_same_bytes_without_importing_duckdb(filled: Lake) -> None:
    first = run(filled, *MIX)
    assert first.returncode == 0, first.stderr
    assert len(entries(filled)) == 1
    hit = run(filled, *MIX, module=True, importtime=True)  # python -m traceflow shares the entry
    assert hit.returncode == 0
    assert hit.stdout == first.stdout
    assert heavy_imports(hit.stderr) == []
    uncached = run(filled, *MIX, module=True, importtime=True, TRACEFLOW_CACHE="0")
    assert uncached.stdout == first.stdout
    assert "duckdb" in heavy_imports(uncached.stderr)  # the check above can fail
    assert total_output(first.stdout) == 5 * 7


def test_new_data_and_compaction_invalidate(filled: Lake) -> None:
    before = run(filled, *MIX)
    (entry,) = entries(filled)
    tamper(entry, b"stale\n")
    assert run(filled, *MIX).stdout == b"stale\n"  # served from the entry
    # an import into an existing partition: a new file, so the partition's mtime moves
    filled.append("requests", rows("c", 1, day=1, output=1000))
    fresh = run(filled, *MIX)
    assert fresh.returncode == 0
    assert total_output(fresh.stdout) == total_output(before.stdout) + 1000
    assert entries(filled) == [entry]
    assert entry.read_bytes().endswith(b"stale\n")  # the lake changed less than 2 s ago: not stored
    settle(filled)
    tamper(entry, b"stale again\n", result_cache.lake_signature(filled.root))
    assert run(filled, *MIX).stdout == b"stale again\n"
    compact = run(filled, "compact")
    assert compact.returncode == 0, compact.stderr
    assert run(filled, *MIX).stdout == fresh.stdout


def test_relative_times_and_failures_are_not_cached(filled: Lake) -> None:
    assert run(filled, *MIX, "--since", "7d").returncode == 0
    assert run(filled, "mix", "--format", "nope").returncode == 2
    assert entries(filled) == []
    assert run(filled, *MIX, "--since", "2026-08-01").returncode == 0
    assert len(entries(filled)) == 1  # the same command with an absolute time is


def test_a_corrupt_entry_is_ignored_and_replaced(filled: Lake) -> None:
    good = run(filled, *MIX)
    (entry,) = entries(filled)
    blob = entry.read_bytes()
    entry.write_bytes(blob[:-3] + b"xyz")  # same length, wrong digest
    again = run(filled, *MIX)
    assert again.returncode == 0
    assert again.stdout == good.stdout
    assert entry.read_bytes() == blob
    p = result_cache.Plan("mix", str(filled.root), entry.name[:-4])
    assert result_cache.lookup(p) == (good.stdout, b"")
    for damaged in (b"", b"\x00garbage", blob[:-1], blob.replace(b" 0 ", b" 1 ", 1)):
        entry.write_bytes(damaged)
        assert result_cache.lookup(p) is None


# -------------------------------------------------------------------------------- in-process


def plan(lake: Lake, *args: str, **env: str) -> result_cache.Plan | None:
    environ = {"HOME": "/nonexistent", **env}
    return result_cache.plan(["traceflow", *args, "--data", str(lake.root)], environ)


def test_what_is_cacheable(lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "isatty", lambda fd: False)
    assert plan(lake, *MIX) is not None
    assert plan(lake, "mix", "--since", "2026-08-01T00:00Z") is not None
    assert plan(lake, "report", "-f", "json") is not None
    assert plan(lake, "sql", "SELECT model, count(*) FROM requests GROUP BY 1") is not None
    assert plan(lake, "query", "token_mix", "-p", "since=2026-08-01") is not None
    for args in (
        ["mix", "--since", "7d"],
        ["mix", "--until=12h"],
        ["mix", "--help"],
        ["report", "--html", str(tmp_path / "r.html")],
        ["import", "claude-code"],
        ["compact"],
        ["sql", "SELECT now()"],
        ["sql", "SELECT * FROM read_csv('/etc/passwd')"],
        ["sql", "SELECT * FROM '/tmp/x.parquet'"],
        ["sql", "SELECT random()"],
        ["sql", "--unknown-flag", "SELECT now()"],  # not hidden as the value of an unknown option
        ["mix", "--unknown-flag", "--since", "7d"],
        ["query", "no_such_query"],
    ):
        assert plan(lake, *args) is None, args
    assert plan(lake, *MIX, TRACEFLOW_CACHE="0") is None
    monkeypatch.setattr(os, "isatty", lambda fd: fd == 1)
    assert plan(lake, *MIX) is None  # a terminal


def test_the_key_covers_environment_and_input_files(lake: Lake, tmp_path: Path) -> None:
    def key(*args: str, **env: str) -> str:
        p = plan(lake, *args, **env)
        assert p is not None
        return p.key

    base = key(*MIX)
    assert key(*MIX) == base
    assert key(*MIX, TZ="Europe/Paris") != base
    # the zone groups and prints the answer: every way of naming it is part of the key
    assert key(*MIX, TRACEFLOW_TZ="Asia/Tokyo") != base
    assert key(*MIX, "--tz", "Asia/Tokyo") != key(*MIX, "--tz", "UTC") != base
    assert key(*MIX, TRACEFLOW_MEMORY_LIMIT="1GB") != base
    assert key(*MIX, TRACEFLOW_CACHE="1") == base
    assert key("mix", "--by", "model", "--format", "json") != base
    prices = tmp_path / "prices.json"
    prices.write_text("{}")
    one = key("ttl", "--prices", str(prices))
    prices.write_text('{"as_of": "2026-01-01"}')
    assert key("ttl", "--prices", str(prices)) != one
    two = key("ttl", "--unknown-flag", "--prices", str(prices))
    prices.write_text('{"as_of": "2026-02-01"}')
    assert key("ttl", "--unknown-flag", "--prices", str(prices)) != two


def test_the_signature_follows_the_views_inputs(lake: Lake) -> None:
    lake.append("requests", rows("a", 1))
    sig = result_cache.lake_signature(lake.root)
    assert result_cache.lake_signature(lake.root) == sig
    (lake.base / "_cache" / "results").mkdir(parents=True)
    (lake.staging / "x.parquet").write_bytes(b"")
    (lake.state_dir / "imports" / "claude-code.json").write_text("{}")
    assert result_cache.lake_signature(lake.root) == sig  # scratch and bookkeeping do not count
    marker = lake.state_dir / "deduped" / "requests.json"
    marker.parent.mkdir()
    marker.write_text("[]")
    sig2 = result_cache.lake_signature(lake.root)
    assert sig2 != sig
    (part,) = (lake.base / "requests").iterdir()
    past = time.time_ns() - 10_000_000_000
    os.utime(part, ns=(past, past))
    sig3 = result_cache.lake_signature(lake.root)
    assert sig3 != sig2
    (part / "new.parquet").write_bytes(b"")
    assert result_cache.lake_signature(lake.root) != sig3


def test_prune_keeps_the_most_recently_used(tmp_path: Path) -> None:
    for i in range(5):
        f = tmp_path / f"{i}.bin"
        f.write_bytes(b"x" * 10)
        os.utime(f, ns=(i * 10**9, i * 10**9))
    assert result_cache.prune(str(tmp_path), max_entries=3) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2.bin", "3.bin", "4.bin"]
    assert result_cache.prune(str(tmp_path), max_bytes=15) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["4.bin"]
