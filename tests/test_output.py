"""Tables for people (``traceflow.output``): units on every number, the terminal's width, ``--wide``;
CSV and JSON keep machine values without float noise."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable

import pytest

from tests.conftest import EXAMPLES, TESTDATA
from tests.test_cli import ROWS, expected, filled  # noqa: F401 - the fixture
from traceflow.analysis.mix import COLUMNS, SAVINGS
from traceflow.output import Rows, render, render_table
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]


def test_mix_by_model_fits_100_columns_and_names_what_it_left_out(
    filled: Lake,  # noqa: F811
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = cli("mix", "--by", "model")
    assert code == 0
    lines = out.rstrip("\n").splitlines()
    assert max(len(line) for line in lines) <= 100
    assert [line.split()[0] for line in lines if line.split()[0] in ("gpt-5", "opus", "sonnet")] == [
        "gpt-5",
        "opus",
        "sonnet",
    ]
    note = " ".join(line for line in lines[lines.index(next(x for x in lines if x.startswith("note:"))) :])
    hidden = note.split("characters: ", 1)[1].split(";", 1)[0].split(", ")
    assert hidden and set(hidden) <= {*COLUMNS, *SAVINGS}
    assert "--wide" in note
    # what is shown is still right: opus's reuse ratio, computed here from the rows
    opus = expected([r for r in ROWS if r[2] == "opus"])
    row = next(line for line in lines if line.startswith("opus"))
    assert f"{opus['reuse_ratio'] * 100:.1f} %" in row


def test_wide_shows_every_column(filled: Lake, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("COLUMNS", "100")
    _, out, _ = cli("mix", "--by", "model", "--wide")
    header = out.splitlines()[0].split()
    assert header == ["model", *COLUMNS, *SAVINGS]
    assert "note:" not in out
    _, out, _ = cli("mix", "--by", "model")  # --wide holds for its own command only
    assert "note:" in out


def test_wide_is_its_commands_own(filled: Lake, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """``--wide`` reaches what its command prints, not the library called after it (it did while it
    was module state): a table rendered then still fits the terminal."""
    monkeypatch.setenv("COLUMNS", "40")
    _, out, _ = cli("mix", "--by", "model", "--wide")
    assert "note:" not in out
    table = render_table(Rows([f"column_{i}" for i in range(8)], [tuple(range(1000, 1008))]))
    assert max(len(line) for line in table.splitlines()) <= 40 and "note:" in table


def test_without_a_terminal_or_columns_nothing_is_left_out(
    filled: Lake,  # noqa: F811
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    _, out, _ = cli("mix", "--by", "model")
    assert out.splitlines()[0].split() == ["model", *COLUMNS, *SAVINGS]


def test_units_on_every_number() -> None:
    rows = Rows(
        ["name", "cost_usd", "drive_bytes", "duration_s", "reuse_ratio", "tokens", "rate_tok_s", "gap_ms"],
        [
            ("a", 1442.676, 1.9199e12, 21_997.2, 0.932, 69_679_130_472_448, 1234.5, 250.0),
            ("b", 2.2738, 512, 42.34, 0.0005, 7, 3.25, 1500.0),
        ],
    )
    text = render_table(rows, width=None)
    a, b = text.splitlines()[2:4]
    assert a.split() == [
        "a",
        "$1,442.68",
        "1.92",
        "TB",
        "6h",
        "6m",
        "93.2",
        "%",
        "69,679,130,472,448",
        "1,234.50/s",
        "250",
        "ms",
    ]
    # one number of decimals per column: $2.27 under $1,442.68, never 2.2738 next to 186.3
    assert b.split() == ["b", "$2.27", "512", "B", "42.3", "s", "0.1", "%", "7", "3.25/s", "1.5", "s"]


def test_small_money_keeps_its_cents_digits() -> None:
    text = render_table(Rows(["cost_usd"], [(0.0024,), (1.5,)]), width=None)
    assert [line.strip() for line in text.splitlines()[2:]] == ["$0.0024", "$1.5000"]


def test_csv_and_json_keep_exact_values_without_float_noise() -> None:
    noisy = 0.1 + 0.2  # 0.30000000000000004
    third = 1 / 3
    rows = Rows(["x", "third", "n", "cost_usd"], [(noisy, third, 69_679_130_472_448, 186.3)])
    parsed = next(csv.DictReader(io.StringIO(render(rows, "csv"))))
    assert parsed == {"x": "0.3", "third": "0.333333333333333", "n": "69679130472448", "cost_usd": "186.3"}
    assert json.loads(render(rows, "json")) == [
        {"x": 0.3, "third": 0.333333333333333, "n": 69_679_130_472_448, "cost_usd": 186.3}
    ]


def test_missing_label_reads_unknown_in_tables_and_null_in_json() -> None:
    rows = Rows(["model", "requests"], [("opus", 2), (None, 3)])
    assert render_table(rows, width=None).splitlines()[3].split() == ["(unknown)", "3"]
    assert "(unknown)" in render(rows, "markdown")
    assert json.loads(render(rows, "json"))[1]["model"] is None


def test_import_summary_has_sizes_and_separators(cli: Cli) -> None:
    code, out, _ = cli("import", "claude-code", str(EXAMPLES / "claude-transcript.jsonl"))
    assert code == 0
    assert "(0.0 MB)" not in out
    size = len((EXAMPLES / "claude-transcript.jsonl").read_bytes())
    assert f"({size / 1e3:.2f} kB)" in out
    code, out, _ = cli("import", "mooncake", str(TESTDATA / "mooncake_synthetic_trace.jsonl"))
    lines = sum(1 for line in (TESTDATA / "mooncake_synthetic_trace.jsonl").read_bytes().splitlines() if line)
    assert f"{lines:,} requests" in out and lines >= 1000


def test_one_metric_per_row_takes_its_unit_from_the_row_name() -> None:
    rows = Rows(
        ["metric", "all", "human"],
        [("gaps", 2.0, 1.0), ("p50_s", 220.8, 441.0), ("reuse_ratio", 0.633, None), ("note", "text", None)],
    )
    lines = render_table(rows, width=None).splitlines()[2:]
    assert [line.split() for line in lines] == [
        ["gaps", "2", "1"],
        ["p50_s", "3m", "41s", "7m", "21s"],
        ["reuse_ratio", "63.3", "%"],
        ["note", "text"],
    ]


def test_an_empty_result_says_no_rows() -> None:
    assert render_table(Rows(["model", "cost_usd"], []), width=None).splitlines()[2] == "(no rows)"


def test_long_text_is_cut_evenly_to_fit_and_the_label_kept_whole() -> None:
    rows = Rows(
        ["name", "summary", "returns"],
        [
            (
                "gap_histogram",
                "idle gaps between consecutive requests of a session " * 3,
                "bin, lo_s, hi_s, " * 8,
            )
        ],
    )
    lines = render_table(rows, width=70).splitlines()
    assert max(len(line) for line in lines) <= 70
    row = lines[2]
    assert row.startswith("gap_histogram  ")
    assert row.count("…") == 2
    summary, returns = (part.strip() for part in row[len("gap_histogram") :].split("…")[:2])
    assert abs(len(summary) - len(returns.lstrip())) <= 2  # cut evenly
    assert any("long text cut" in line for line in lines[3:])
