"""Every read command's table at 80 columns (issue 32, part 5): no line is wider, and the columns
the view declares essential are shown, whole (their headers are read back from the table)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import corpus_generator
from traceflow.store.lake import Lake

WIDTH = 80

#: (arguments, the column headers that must show at 80 columns); SESSION is the busiest session.
CASES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("mix",), ("requests", "total_tokens", "cost_usd")),
    (("mix", "--by", "day"), ("day", "total_tokens", "cost_usd")),
    (("mix", "--by", "model"), ("model", "total_tokens", "cost_usd")),
    (("mix", "--by", "session"), ("session", "total_tokens", "cost_usd")),
    (("blocks",), ("start", "status", "cost_usd", "remaining_min", "projected_cost_usd", "usd_per_hour")),
    (("misses",), ("cause", "misses", "missed_tokens", "miss_cost_usd")),
    (("misses", "--list"), ("started_at", "cause", "missed_tokens", "miss_cost_usd")),
    (("misses", "--by", "session"), ("session", "misses", "missed_tokens", "miss_cost_usd")),
    (("timeline", "SESSION"), ("time", "cause", "missed", "miss_cost_usd")),
    (("sessions",), ("metric", "value")),
    (("sessions", "--list"), ("root_session_id", "started_at", "requests", "duration_s")),
    (("sessions", "--by", "model"), ("model", "sessions", "requests")),
    (("gaps",), ("metric", "all")),
    (("gaps", "--by", "model"), ("model", "gaps", "p50_s")),
    (("ttl",), ("ttl", "cost_usd", "expiry_cost_usd")),
    (("working-set",), ("ttl", "peak_tokens", "peak_at")),
    (("load",), ("metric", "value")),
    (("check",), ("metric", "window", "baseline")),
    (("compare",), ()),
    (("report",), ("requests", "total_tokens", "cost_usd")),
    (("queries",), ("name",)),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A lake of a generated Claude Code corpus (19 days, sub-agents) and its busiest session."""
    root = tmp_path_factory.mktemp("narrow")
    corpus_generator().generate_corpus(root / "corpus", 2.0, 5)
    lake = Lake(root / "data")
    lake.ensure()
    code, out = _run(["import", "claude-code", str(root / "corpus" / "projects"), "--data", str(lake.root)])
    assert code == 0, out
    code, out = _run(["sessions", "--list", "--format", "json", "--data", str(lake.root)])
    busiest = max(json.loads(out), key=lambda r: r["requests"])["root_session_id"]
    yield lake.root, busiest


def _run(argv: list[str], columns: int | None = None) -> tuple[int, str]:
    from traceflow.cli.app import app, register_all

    register_all()
    env = {"COLUMNS": str(columns)} if columns else {}
    result = CliRunner().invoke(app, argv, env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout


def headers(text: str) -> list[str]:
    """The column names of every table in ``text``, read back from its header lines: each run of
    dashes under a header spans one column; the words above it, top to bottom, joined by ``_``."""
    lines = text.splitlines()
    names: list[str] = []
    for k, line in enumerate(lines):
        if not line.strip() or set(line) - {"-", " "}:
            continue
        spans, i = [], 0
        while i < len(line):
            if line[i] == "-":
                j = i
                while j < len(line) and line[j] == "-":
                    j += 1
                spans.append((i, j))
                i = j
            else:
                i += 1
        above: list[str] = []
        for up in reversed(lines[max(0, k - 6) : k]):
            inside = all(any(a <= c < b for a, b in spans) for c, ch in enumerate(up) if ch != " ")
            if not up.strip() or not set(up) - {"-", " "} or not inside:
                break
            above.insert(0, up)
        for a, b in spans:
            words = [w for w in (ln[a:b].strip() for ln in above) if w]
            names.append("_".join(words))
    return names


@pytest.mark.parametrize(("args", "essential"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_every_table_fits_80_columns_with_its_essential_columns(
    corpus: tuple[Path, str], args: tuple[str, ...], essential: tuple[str, ...]
) -> None:
    root, session = corpus
    argv = [session if a == "SESSION" else a for a in args]
    code, out = _run([*argv, *(["--data", str(root)] if args != ("queries",) else [])], WIDTH)
    assert code == 0, out
    wide = [ln for ln in out.splitlines() if len(ln) > WIDTH]
    assert not wide, f"{len(wide)} lines over {WIDTH} characters, e.g. {wide[0]!r}"
    shown = headers(out)
    assert set(essential) <= set(shown), f"{set(essential) - set(shown)} left out of {shown}"


def test_headers_are_read_back_whole() -> None:
    """The reader of this test on a table whose headers wrap (an independent check of the check)."""
    from traceflow.output import Rows, render_table

    text = render_table(Rows(["day", "total_tokens", "miss_cost_usd"], [("2026-08-01", 1_234_567, 0.5)]), 30)
    assert max(len(ln) for ln in text.splitlines()) <= 30 and len(text.splitlines()) > 4
    assert headers(text) == ["day", "total_tokens", "miss_cost_usd"]


def test_compare_with_nothing_to_compare_names_the_data_it_needs(corpus: tuple[Path, str]) -> None:
    root, _ = corpus
    code, out = _run(["compare", "--data", str(root)], WIDTH)
    assert code == 0 and "nothing to compare" in out and "claude_code.session.count" in out
    assert "requests" not in headers(out)  # no empty table


def _active_lake(root: Path) -> Path:
    """Requests 8, 5.5, 3 and 0.5 hours ago (the audit's case): a block is active now."""
    lake = Lake(root / "data")
    lake.ensure()
    now = dt.datetime.now(dt.UTC)
    rows: list[dict[str, Any]] = [
        {
            "event_id": f"e{i}",
            "source": "claude-code",
            "model": "claude-sonnet-4-5",
            "session_id": "s",
            "started_at": int((now - dt.timedelta(hours=h)).timestamp() * 1_000_000),
            "cold_input_tokens": 1_000,
            "cache_read_tokens": 400_000,
            "cache_write_tokens": 30_000,
            "output_tokens": 2_000,
        }
        for i, h in enumerate((8, 5.5, 3, 0.5))
    ]
    lake.append("requests", rows)
    return lake.root


def test_active_block_is_a_panel_with_cost_time_left_and_projection(tmp_path: Path) -> None:
    root = _active_lake(tmp_path)
    code, out = _run(["blocks", "--active", "--data", str(root)], WIDTH)
    assert code == 0, out
    assert all(len(ln) <= WIDTH for ln in out.splitlines())
    text = out.lower()
    for word in ("elapsed", "remaining", "tokens", "cost", "burn rate", "projected"):
        assert word in text, word
    code, js = _run(["blocks", "--active", "--format", "json", "--data", str(root)])
    [block] = json.loads(js)
    assert f"${block['cost_usd']:,.2f}" in out and f"{block['total_tokens']:,}" in out  # the block's
    code, out = _run(["blocks", "--data", str(root)], WIDTH)
    assert {"start", "status", "cost_usd", "remaining_min", "projected_cost_usd"} <= set(headers(out))
