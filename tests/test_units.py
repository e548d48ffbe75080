"""traceflow.units: one reading of sizes, bandwidths and durations for every option that takes one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import traceflow.cli.sizing  # noqa: F401  (registers size on the app)
from traceflow.errors import UsageError
from traceflow.kv.sizing import parse_tier
from traceflow.units import (
    format_bandwidth,
    format_duration,
    format_size,
    parse_bandwidth,
    parse_duration,
    parse_size,
)

GB, GIB = 10**9, 2**30


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", 0),
        ("4096", 4096),
        ("1b", 1),
        ("1kB", 10**3),
        ("1KB", 10**3),
        ("1k", 10**3),
        ("1MB", 10**6),
        ("1GB", GB),
        ("1gb", GB),
        ("1G", GB),
        ("1TB", 10**12),
        ("1PB", 10**15),
        ("1KiB", 2**10),
        ("1kib", 2**10),
        ("1MiB", 2**20),
        ("64mi", 64 * 2**20),
        ("1GiB", GIB),
        ("1Gi", GIB),
        ("1TiB", 2**40),
        ("1PiB", 2**50),
        ("1.5TB", 1.5e12),
        ("12.8TB", 12.8e12),
        (".5kB", 500),
        ("1e9", GB),
        ("2.5e3MB", 2.5e9),
        ("64 MiB", 64 * 2**20),
        ("  80GB ", 80 * GB),
        ("1_000_000", 10**6),
    ],
)
def test_sizes(text: str, expected: float) -> None:
    assert parse_size(text, "--size") == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "lots",
        "GB",
        "-1GB",
        "1,000",
        "1,5GB",
        "1.2.3GB",
        "1bb",
        "1Gbps",
        "1Gbit",
        "1EB",
        "1e999999",
        "nan",
        "inf",
    ],
)
def test_bad_sizes_name_the_option_and_the_forms(text: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_size(text, "--drive-size")
    message = str(e.value)
    assert message.startswith(f"--drive-size {text!r} is not a size")
    assert "80GB" in message and "512GiB" in message and "10^3" in message and "2^10" in message


def test_unlimited_sizes_only_where_allowed() -> None:
    assert parse_size("inf", "--tier dram", unlimited=True) == math.inf
    assert parse_size("Unlimited", "--tier dram", unlimited=True) == math.inf
    assert parse_size("1GB", "--tier dram", unlimited=True) == GB
    with pytest.raises(UsageError, match="is not a size"):
        parse_size("inf", "--max-body-bytes")


def test_bandwidths() -> None:
    assert parse_bandwidth("14GB/s", "read") == 14 * GB
    assert parse_bandwidth("1GiB/s", "read") == GIB
    assert parse_bandwidth("5.08 GB/S", "read") == 5.08e9
    assert parse_bandwidth("20.3GB", "read") == 20.3e9  # the /s may be left out
    for bad in ("fast", "1Gbps", "1GB/h", "/s"):
        with pytest.raises(UsageError, match=rf"^--ssd-write-rate '{bad}' is not a bandwidth; .*14GB/s"):
            parse_bandwidth(bad, "--ssd-write-rate")


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("300", 300),
        ("45s", 45),
        ("5m", 300),
        ("5M", 300),
        ("90min", 5400),
        ("1h", 3600),
        ("1.5h", 5400),
        ("1d", 86400),
        ("250ms", 0.25),
        ("0.1ms", 1e-4),
        (" 2 h ", 7200),
        ("1e3", 1000),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--ttl") == seconds


@pytest.mark.parametrize("text", ["", "soon", "-5m", "5 minutes", "1w", "1.2.3s", "h", "1e999999h"])
def test_bad_durations_name_the_option_and_the_forms(text: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_duration(text, "--resume-after")
    assert str(e.value) == (
        f"--resume-after {text!r} is not a duration; write seconds or 250ms, 30s, 5m, 1.5h, 1d"
    )


def test_durations_are_positive_unless_zero_is_allowed() -> None:
    for zero in ("0", "0s", "0.0h"):
        with pytest.raises(UsageError, match="is not a positive duration"):
            parse_duration(zero, "--resolution")
        assert parse_duration(zero, "latency", zero=True) == 0.0


def test_duration_labels() -> None:
    assert [format_duration(t) for t in (300, 3600, 1800, 90, 5400, 86400, 172800, 30, 0.25, 0)] == [
        "5m",
        "1h",
        "30m",
        "90s",
        "90m",
        "1d",
        "2d",
        "30s",
        "0.25s",
        "0s",
    ]
    for seconds in (0.25, 30, 90, 300, 5400, 3600, 86400):
        assert parse_duration(format_duration(seconds), "--ttl") == seconds


def test_size_and_bandwidth_labels_parse_back() -> None:
    assert [format_size(b) for b in (0, 999, 1000, 1.92e12, 2.5e15, math.inf)] == [
        "0 B",
        "999 B",
        "1.00 kB",
        "1.92 TB",
        "2.50 PB",
        "inf",
    ]
    assert format_bandwidth(20.3e9) == "20.30 GB/s"
    for n in (512, 80e9, 1.92e12):
        assert parse_size(format_size(n), "size") == n
    assert parse_bandwidth(format_bandwidth(5.08e9), "read") == 5.08e9


# ------------------------------------------------------------ every option that takes a size or a rate


def test_tier_sizes_and_read_rates() -> None:
    assert parse_tier("dram=1GB").capacity_bytes == GB
    assert parse_tier("dram=1GiB").capacity_bytes == GIB
    assert parse_tier("ssd=1TB:read=1GB/s").read_bytes_per_s == GB
    assert parse_tier("ssd=1TB:read=1GiB/s").read_bytes_per_s == GIB
    assert parse_tier("ssd=1TB:latency=250ms:ttl=1.5h").latency_s == 0.25
    with pytest.raises(UsageError, match=r"--tier 'ssd=1TB:ttl=0' ?: ?ttl '0' is not a positive duration"):
        parse_tier("ssd=1TB:ttl=0")


def _size_json(cli: Any, *args: str) -> dict[str, Any]:
    code, out, err = cli("size", "--kv-model", "MiniMax-M2", "--rate", "4200", *args, "--format", "json")
    assert code == 0, err
    return dict(json.loads(out))


def test_size_command_drive_size_and_write_rate(cli: Any) -> None:
    for text, expected in (("1GB", GB), ("1GiB", GIB)):
        report = _size_json(
            cli, "--drive-size", text, "--ssd-write-rate", f"{text}/s", "--tier", f"dram={text}"
        )
        assert report["ssd_drive_bytes"] == expected
        assert report["ssd_write_bytes_per_s"] == expected
        assert report["tiers"][0]["capacity_bytes"] == expected


@pytest.mark.parametrize(
    "args, message",
    [
        (("--drive-size", "big"), "--drive-size 'big' is not a size; write bytes or 80GB"),
        (("--ssd-write-rate", "7Gbps"), "--ssd-write-rate '7Gbps' is not a bandwidth"),
        (("--ttl", "forever"), "--ttl 'forever' is not a duration"),
    ],
)
def test_size_command_rejects_bad_values(cli: Any, args: tuple[str, ...], message: str) -> None:
    code, _, err = cli("size", "--kv-model", "MiniMax-M2", "--rate", "4200", *args)
    assert code == 2 and message in err


def _serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> tuple[dict[str, Any], Any]:
    """``traceflow serve --data TMP ARGS`` in-process with the server stubbed: what it was given."""
    from traceflow.cli.app import app, register
    from traceflow.collectors import server

    register("serve")
    seen: dict[str, Any] = {}
    monkeypatch.setattr(server, "run_server", lambda **kw: seen.update(kw) or 0)
    result = CliRunner().invoke(app, ["serve", "--data", str(tmp_path), *args])
    return seen, result


@pytest.mark.parametrize("flag", ["--max-body-bytes", "--max-inflight-bytes", "--max-backlog-bytes"])
def test_collector_limits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flag: str) -> None:
    key = flag.removeprefix("--").replace("-", "_")
    for text, expected in (("1GB", GB), ("1GiB", GIB), ("64MiB", 64 << 20), ("1000", 1000)):
        seen, result = _serve(monkeypatch, tmp_path, flag, text)
        assert result.exit_code == 0, result.output
        assert seen[key] == expected and isinstance(seen[key], int)
    seen, result = _serve(monkeypatch, tmp_path)  # the defaults
    assert (seen["max_body_bytes"], seen["max_inflight_bytes"], seen["max_backlog_bytes"]) == (
        64 << 20,
        256 << 20,
        2 << 30,
    )


def test_collector_rejects_a_bad_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _, result = _serve(monkeypatch, tmp_path, "--max-body-bytes", "1 gig")
    assert isinstance(result.exception, UsageError)
    assert "--max-body-bytes '1 gig' is not a size; write bytes or 80GB" in str(result.exception)


def test_since_takes_an_age_in_any_duration_unit() -> None:
    import datetime as dt

    from traceflow.store.selection import parse_time

    now = dt.datetime.now(dt.UTC)
    for text, seconds in (("7d", 7 * 86400), ("1.5h", 5400), ("30m", 1800), ("90s", 90)):
        age = (now - parse_time(text, "--since")).total_seconds()
        assert seconds - 1 < age < seconds + 60
    assert parse_time("2026-08-01T12:00Z", "--since") == dt.datetime(2026, 8, 1, 12, tzinfo=dt.UTC)
    with pytest.raises(UsageError, match="is not a time"):
        parse_time("7x", "--since")
