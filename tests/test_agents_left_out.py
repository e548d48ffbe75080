"""The per-request cache analyses leave out the agents whose rows cannot answer them (store/recorded.py)
and say so: Copilot CLI's rows are process totals (one row for many requests), Qwen Code records no
cache write. A lake with those agents beside Claude Code answers gaps, misses, TTL and the working set
exactly as the lake of Claude Code alone does, and names the agents it left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.test_agents_mix import DATA, run
from traceflow.store import recorded


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Claude Code alone; with Qwen Code; with Qwen Code and Copilot CLI."""
    tmp = tmp_path_factory.mktemp("left-out")
    out = {name: tmp / name for name in ("claude", "qwen", "all")}
    for lake in out.values():
        run("import", "claude-code", str(EXAMPLES / "claude-transcript.jsonl"), "--data", str(lake))
    for lake in (out["qwen"], out["all"]):
        run("import", "qwen", str(DATA / "qwen"), "--data", str(lake))
    run("import", "copilot", str(DATA / "copilot"), "--data", str(out["all"]))
    return out


def _json(command: str, lake: Path) -> dict[str, object]:
    out = json.loads(run(command, "--format", "json", "--data", str(lake)))
    assert isinstance(out, dict)
    return out


@pytest.mark.parametrize(
    ("command", "gone", "same_as"),
    [
        ("gaps", {"copilot"}, "qwen"),
        ("misses", {"copilot"}, "qwen"),
        ("ttl", {"copilot", "qwen-code"}, "claude"),
        ("working-set", {"copilot"}, "qwen"),
    ],
)
def test_an_analysis_names_the_agents_it_left_out(
    lakes: dict[str, Path], command: str, gone: set[str], same_as: str
) -> None:
    got, want = _json(command, lakes["all"]), _json(command, lakes[same_as])
    left = got.pop("left_out")
    assert isinstance(left, list)
    assert {e["agent"] for e in left} == gone
    by = {e["agent"]: e["reason"] for e in left}
    assert by["copilot"] == "records session totals, not one row per request"
    if "qwen-code" in by:
        assert by["qwen-code"] == "records no cache write"
    assert isinstance(want.pop("left_out"), list)
    assert got == want  # the agents left out change nothing else


def test_qwen_counts_in_gaps(lakes: dict[str, Path]) -> None:
    """Qwen Code records one row per request: gaps reads it (more gaps than Claude Code's alone)."""
    assert _json("gaps", lakes["qwen"])["gaps"] > _json("gaps", lakes["claude"])["gaps"]  # type: ignore[operator]


def test_the_table_says_it_under_the_table(lakes: dict[str, Path]) -> None:
    out = run("gaps", "--data", str(lakes["all"]))
    assert out.rstrip().splitlines()[-1] == (
        "note: gaps leaves out copilot (records session totals, not one row per request)"
    )
    assert "note:" not in run("gaps", "--data", str(lakes["qwen"]))


def test_every_importing_agent_has_a_row() -> None:
    """Every agent an importer writes is in the table (a new importer must say what it records)."""
    import importlib
    import pkgutil

    import traceflow.importers as pkg

    agents = set()
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"traceflow.importers.{info.name}")
        if isinstance(getattr(mod, "AGENT", None), str):
            agents.add(mod.AGENT)
    assert agents and agents <= set(recorded.RECORDS), agents - set(recorded.RECORDS)


def test_an_unknown_agent_records_everything() -> None:
    assert all(recorded.records("some-otlp-service", k) for k in recorded.KINDS)
    assert not recorded.records("copilot", "per_request")
    with pytest.raises(ValueError, match="unknown kind"):
        recorded.records("codex", "latency")


def test_the_mean_gap_is_the_same_every_run(lakes: dict[str, Path]) -> None:
    """DuckDB adds the partial sums of a float column in the order its threads finish: the mean gap is
    summed in whole microseconds, so that it is the same every run (its last digit changed about one
    run in ten, and ``gaps`` of the lake with Copilot left out then differed from the lake without it)."""
    from traceflow.analysis import gaps
    from traceflow.store.lake import Lake

    means = set()
    for lake in ("qwen", "all"):
        con = Lake(lakes[lake]).connect()
        try:
            selection, _ = recorded.narrow(con, None, "gaps")
            for _ in range(40):
                row = gaps.gap_summary(con, selection).to_dicts()[0]
                means.add((row["mean_s"], row["human_mean_s"], row["agent_mean_s"]))
        finally:
            con.close()
    assert len(means) == 1, means
