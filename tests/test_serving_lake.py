"""``simulate --serving`` on the lake's selection (issue 35): what is offered is what was selected."""

from __future__ import annotations

import json
from collections.abc import Callable

from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
T0 = 1_796_000_000  # seconds since the epoch (2026-11)


def _fill(lake: Lake) -> None:
    """3 sessions of 4 turns a minute apart, contexts growing 2,000 tokens a turn; a 4th a day later."""
    rows = []
    for s in range(4):
        for k in range(4):
            start = T0 + (86_400 if s == 3 else 0) + 7 * s + 60 * k
            rows.append(
                {
                    "event_id": f"s{s}k{k}",
                    "source": "test",
                    "seq": k,
                    "session_id": f"sess{s}",
                    "started_at": start * 1_000_000,
                    "cold_input_tokens": 2_000,
                    "cache_read_tokens": 2_000 * k,
                    "output_tokens": 100,
                }
            )
    lake.append("requests", rows)


def test_serving_offers_exactly_the_selected_requests(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    code, out, err = cli("simulate", "--serving", "h200", "--format", "json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["workload"]["source"] == "lake"
    assert rep["requests_offered"] == 16 and rep["workload"]["sessions"] == 4
    # the first day only: 3 sessions x 4 turns
    code, out, err = cli("simulate", "--serving", "h200", "--until", "2026-11-30", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["requests_offered"] == 12


def test_rate_scale_offers_k_times_the_sessions(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    code, out, err = cli("simulate", "--serving", "h200", "--rate-scale", "10", "--format", "json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["requests_offered"] == 160 and rep["workload"]["rate_scale"] == 10


def test_options_serving_does_not_use_are_refused(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    for args, message in (
        (["--rate-scale", "2"], "add --serving"),
        (["--serving", "h200", "--sweep"], "--sweep"),
        (["--serving", "h200", "--workload", "agentic-coding", "--rate-scale", "2"], "drop --rate-scale"),
    ):
        code, _, err = cli("simulate", *args)
        assert code == 2 and message in err, (args, err)


def test_h200_times_n_and_a_kv_model_it_serves(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    code, out, err = cli("simulate", "--serving", "h200x8", "--format", "json")
    assert code == 0, err
    box = json.loads(out)["serving"]
    # 8 x (141 GB x 0.9 - 16.06 GB / 8 - 4 GiB) by hand
    assert box["gpus"] == 8
    assert box["kv_bytes"] == 8 * (141e9 * 0.9 - 8.03e9 * 2 / 8 - 4 * 2**30)
    code, _, err = cli("simulate", "--serving", "h200x8", "--kv-model", "Llama-3.1-70B")
    assert code == 0, err


def test_the_table_output_names_the_workload(cli: Cli, lake: Lake) -> None:
    _fill(lake)
    code, out, err = cli("simulate", "--serving", "h200")
    assert code == 0, err
    assert "lake" in out
