"""``--kv-model`` on every command that turns tokens into bytes: working-set, report, dashboard
(issue 35). One resolver (``KvChoice.per_token``) for them and ``size``/``simulate``; the byte
figures follow the model's geometry, computed here by hand from docs/sizing-formulas.md's formula."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.test_analyses import fill
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
# Llama-3.1-70B BF16: 2 (K and V) x 80 layers x 8 KV heads x 128 head dim x 2 bytes
LLAMA_70B = 2 * 80 * 8 * 128 * 2


def test_working_set_takes_a_model(lake: Lake, cli: Cli) -> None:
    fill(lake)
    code, out, err = cli("working-set", "--ttl", "5m", "--kv-model", "Llama-3.1-70B", "--format", "json")
    assert code == 0, err
    ws = json.loads(out)
    assert LLAMA_70B == 327_680
    assert ws["peak_bytes"] == pytest.approx(ws["peak_tokens"] * LLAMA_70B)
    assert ws["kv_assumption"].startswith("Llama-3.1-70B bf16: 327,680 B/token")
    code, out, err = cli("working-set", "--ttl", "5m", "--kv-model", "Llama-3.1-70B", "--dtype", "fp8")
    assert code == 0, err
    assert "163,840 B/token" in out  # FP8: half of BF16
    # the two ways of giving bytes are one choice
    code, _, err = cli("working-set", "--kv-model", "Llama-3.1-70B", "--kv-bytes-per-token", "1000")
    assert code == 2 and "not both" in err
    code, _, err = cli("working-set", "--dtype", "fp8")
    assert code == 2 and "--kv-model" in err
    code, _, err = cli("working-set", "--kv-model", "no-such-model")
    assert code == 2


def test_report_says_its_assumption(lake: Lake, cli: Cli) -> None:
    fill(lake)
    code, out, err = cli("report", "--kv-model", "Llama-3.1-70B", "--format", "json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["settings"]["kv_bytes_per_token"] == LLAMA_70B
    assert rep["settings"]["kv_assumption"].startswith("Llama-3.1-70B")
    for row in rep["working_set"]:
        if row.get("peak_tokens") is not None:
            assert row["peak_bytes"] == pytest.approx(row["peak_tokens"] * LLAMA_70B)
    code, out, err = cli("report", "--kv-model", "Llama-3.1-70B")
    assert code == 0, err
    assert "KV bytes per token: Llama-3.1-70B bf16: 327,680 B/token" in out


def test_dashboard_takes_the_same_options(cli: Cli) -> None:
    code, out, _ = cli("dashboard", "--help", data=False)
    assert code == 0 and "--kv-model" in out and "--kv-bytes-per-token" in out
    code, _, err = cli("dashboard", "--kv-model", "Llama-3.1-70B", "--kv-bytes-per-token", "5")
    assert code == 2 and "not both" in err
