"""``simulate``'s output: instants as instants, byte figures with their unit (issue 35)."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable

from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
T0 = dt.datetime(2026, 12, 3, 9, 0, tzinfo=dt.UTC)
B = 126_976  # MiniMax-M2 FP8 KV bytes per token (docs/sizing.md)


def _fill(lake: Lake) -> None:
    """One session: two turns a minute apart, then a third 20 minutes later (a resume)."""
    times = [0, 60, 60 + 1_200]
    lake.append(
        "requests",
        [
            {
                "event_id": f"e{k}",
                "source": "test",
                "seq": k,
                "session_id": "s",
                "started_at": int((T0.timestamp() + t) * 1_000_000),
                "cold_input_tokens": 4_096,
                "cache_read_tokens": 4_096 * k,
                "output_tokens": 10,
            }
            for k, t in enumerate(times)
        ],
    )


def test_worst_resumed_is_an_instant_and_bytes_carry_units(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    args = ("simulate", "--kv-model", "MiniMax-M2", "--tier", "dram=64GB", "--block-size", "1024")
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    rep = json.loads(out)
    worst = rep["worst_resumed"]
    assert worst["at"] == "2026-12-03T09:21:00+00:00"  # T0 + 1,260 s, by hand
    assert worst["after_start_s"] == 1_260
    assert "time_s" not in worst
    # raw bytes stay in the JSON, under _bytes names: 4,096 + 8,192 tokens hit, by hand
    assert rep["read_bytes"] == (4_096 + 8_192) * B
    assert rep["tiers"][0]["read_bytes"] == rep["read_bytes"] and "bytes_read" not in rep
    code, out, err = cli(*args)
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("worst_resumed.at"))
    assert "2026-12-03 09:21" in line and not re.search(r"\d+d \d+h", line)
    read = next(ln for ln in out.splitlines() if ln.startswith("read_bytes"))
    assert re.search(r"1\.56 GB\b", read), read  # 1,560,379,392 bytes in decimal GB
    assert "1,560,379,392" not in out


def test_a_bandwidth_per_gpu_prints_as_a_bandwidth() -> None:
    from traceflow.output import Rows, render

    out = render(Rows(["kv_load_bytes_per_s_per_gpu"], [[53.9e9]]), "table")
    assert "53.90 GB/s" in out
