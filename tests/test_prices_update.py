"""``traceflow prices update FILE`` (issue 25): LiteLLM's price file into the user's price table, read
by every priced report, which says which table and date it used."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from traceflow.prices import PriceModel
from traceflow.store.lake import Lake

CLI = Callable[..., tuple[int, str, str]]
SAMPLE = Path(__file__).resolve().parent / "data" / "litellm" / "model_prices_sample.json"


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config" / "prices.json"
    monkeypatch.setenv("TRACEFLOW_PRICES", str(path))
    return path


def test_update_converts_per_token_to_per_million(table: Path, cli: CLI) -> None:
    code, out, err = cli("prices", "update", str(SAMPLE), "--format", "json", data=False)
    assert code == 0, err
    summary = json.loads(out)
    # five first-party models; the Bedrock row and the image model are left out, sample_spec skipped
    assert summary["models"] == 5
    assert summary["skipped_provider_prefixed"] == 1 and summary["skipped_without_prices"] == 1
    assert summary["with_cache_prices"] == 5 and summary["with_1h_write_prices"] == 3
    written = json.loads(table.read_text())
    assert written["models"]["claude-sonnet-4-5"] == {
        "input": 3.0,
        "output": 15.0,
        "cache_read": 0.3,
        "cache_write": 3.75,
        "cache_write_1h": 6.0,
    }
    assert written["models"]["gpt-5"] == {"input": 1.25, "output": 10.0, "cache_read": 0.125}
    assert written["as_of"] == summary["as_of"] and "LiteLLM" in written["source"]
    pm = PriceModel.load(None)
    assert pm.as_of == summary["as_of"] and pm.source == written["source"]
    # gpt-5 reads at its own price (0.1x here by LiteLLM), writes fall back to the multipliers
    assert pm.cost("gpt-5", 0, 1_000_000, 0, 0) == pytest.approx(0.125)
    assert pm.cost("gpt-5", 0, 0, 1_000_000, 0) == pytest.approx(1.25 * 1.25)
    # a dated name matches its prefix; the built-in models not in the file keep their prices
    assert pm.cost("claude-sonnet-4-5-20250929", 0, 0, 1_000_000, 0, 1_000_000) == pytest.approx(6.0)
    assert pm.price("claude-3-opus-20240229").input == 15.0


def test_reports_name_the_table_and_date(table: Path, cli: CLI, lake: Lake) -> None:
    lake.append(
        "requests",
        [
            {
                "event_id": "g1",
                "source": "test",
                "model": "gemini-2.5-pro",
                "session_id": "s",
                "started_at": 1785585600_000000,
                "cold_input_tokens": 0,
                "cache_read_tokens": 1_000_000,
                "cache_write_tokens": 0,
                "output_tokens": 0,
            }
        ],
    )
    code, out, _ = cli("mix")
    assert code == 0 and "(built-in list prices as of 2025-11-24)" in out
    before = json.loads(cli("mix", "--format", "json")[1])["cost_usd"]
    assert before == pytest.approx(3.0 * 0.1)  # the built-in default price ($3), read at 0.1x
    assert cli("prices", "update", str(SAMPLE), data=False)[0] == 0
    code, out, _ = cli("mix")
    assert code == 0 and "LiteLLM prices from model_prices_sample.json" in out and " as of 20" in out
    after = json.loads(cli("mix", "--format", "json")[1])["cost_usd"]
    assert after == pytest.approx(0.3125)  # LiteLLM's own cache-read price for gemini-2.5-pro
    code, out, _ = cli("ttl", "--format", "json")
    assert json.loads(out)["prices"]["source"].startswith("LiteLLM prices")
    # a --prices file goes over the table
    extra = table.parent / "extra.json"
    extra.write_text(json.dumps({"models": {"gemini-2.5-pro": {"cache_read": 0.5}}}))
    again = json.loads(cli("mix", "--format", "json", "--prices", str(extra))[1])["cost_usd"]
    assert again == pytest.approx(0.5)


def test_show_lists_the_table(table: Path, cli: CLI) -> None:
    code, out, _ = cli("prices", data=False)
    assert code == 0 and out.startswith("Prices: built-in list prices as of 2025-11-24")
    cli("prices", "update", str(SAMPLE), data=False)
    code, out, _ = cli("prices", "show", "--format", "json", data=False)
    shown = json.loads(out)
    assert shown["models"]["claude-haiku-4-5"]["cache_write_1h"] == 2.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "not LiteLLM's object of models"),
        ('{"x": {"mode": "chat"}}', "no model with input_cost_per_token"),
        ("{not json", "is not valid JSON"),
    ],
)
def test_bad_files_are_one_line(table: Path, cli: CLI, tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = cli("prices", "update", str(bad), data=False)
    assert code == 2 and message in err
    assert not table.exists()
    code, _, err = cli("prices", "update", data=False)
    assert code == 2 and "needs LiteLLM's price file" in err
    code, _, err = cli("prices", "update", str(tmp_path / "missing.json"), data=False)
    assert code == 2 and "no such file" in err
