"""``traceflow prices update FILE`` (issue 25): LiteLLM's price file into the user's price table, read
by every priced report, which says which table and date it used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def test_rows_that_are_no_prices_are_refused_and_counted(table: Path, cli: CLI, tmp_path: Path) -> None:
    """A price that overflows to infinity, is NaN or negative, and a name under 3 characters (it would
    be the longest matching prefix of every unlisted model) leave their row out, counted (issue 33)."""
    good = {"input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05}
    rows = {
        "claude-good-1": good,
        "claude-overflow": {**good, "output_cost_per_token": 1e308},  # 1e308 x 1e6 = inf
        "claude-nan": {**good, "input_cost_per_token": float("nan")},
        "claude-negative-cache": {**good, "cache_read_input_token_cost": -3e-07},
        "": good,
        "c": {"input_cost_per_token": 1e-03, "output_cost_per_token": 1e-03},
        "gp": good,
    }
    src = tmp_path / "litellm.json"
    src.write_text(json.dumps(rows))  # json writes NaN, as a careless exporter would
    code, out, err = cli("prices", "update", str(src), "--format", "json", data=False)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["models"] == 1
    assert summary["skipped_bad_prices"] == 3 and summary["skipped_short_names"] == 3
    assert list(json.loads(table.read_text())["models"]) == ["claude-good-1"]
    pm = PriceModel.load(None)
    assert pm.price("codex-unlisted-model") == PriceModel().default  # not "c"'s price
    # a price table written by hand with such rows is refused, not read as inf or negative
    for bad in (
        {"models": {"x-model": {"input": 1e400, "output": 1}}},
        {"models": {"c": {"input": 1, "output": 1}}},
    ):
        hand = tmp_path / "hand.json"
        hand.write_text(json.dumps(bad).replace("Infinity", "1e400"))
        code, _, err = cli("prices", "show", "--prices", str(hand), data=False)
        assert code == 2 and str(hand) in err, err


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # a subprocess: a FIFO read in-process would hang the test run rather than fail it
    return subprocess.run(
        [sys.executable, "-m", "traceflow", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "TRACEFLOW_CACHE": "0"},
        timeout=60,
    )


def _one_line(run: subprocess.CompletedProcess[str], *words: str) -> None:
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr[-2000:]
    for word in words:
        assert word in run.stderr, (word, run.stderr)


def test_only_regular_files_of_bounded_size_are_read(table: Path, tmp_path: Path) -> None:
    env = {"TRACEFLOW_PRICES": str(table), "TRACEFLOW_DATA": str(tmp_path / "lake")}
    fifo = tmp_path / "prices.fifo"
    os.mkfifo(fifo)
    _one_line(_run("prices", "update", str(fifo), env=env), str(fifo), "not a regular file")
    _one_line(_run("prices", "update", "/dev/zero", env=env), "/dev/zero", "not a regular file")
    _one_line(_run("prices", "show", "--prices", str(fifo), env=env), str(fifo), "not a regular file")
    small = {**env, "TRACEFLOW_MAX_DOCUMENT_BYTES": "1000"}
    _one_line(_run("prices", "update", str(SAMPLE), env=small), str(SAMPLE), "TRACEFLOW_MAX_DOCUMENT_BYTES")
    assert not table.exists()


def test_json_nested_200000_deep_is_one_line_and_breaks_nothing_after(table: Path, tmp_path: Path) -> None:
    env = {"TRACEFLOW_PRICES": str(table), "TRACEFLOW_DATA": str(tmp_path / "lake")}
    deep = tmp_path / "deep.json"
    deep.write_text('{"m": ' + "[" * 200_000 + "]" * 200_000 + "}")
    _one_line(_run("prices", "update", str(deep), env=env), str(deep), "nests")
    assert not table.exists()
    assert _run("prices", "show", env=env).returncode == 0  # later priced commands still work
    _one_line(_run("prices", "show", "--prices", str(deep), env=env), str(deep), "nests")
    # the user's table itself so nested: every priced command says so in one line
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(deep.read_text())
    _one_line(_run("prices", "show", env=env), str(table), "nests")
