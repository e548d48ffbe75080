"""OpenClaw importer on tests/data/agent-logs/openclaw (sources: tests/data/SOURCES.md); numbers read
off the fixture by hand."""

from __future__ import annotations

from pathlib import Path

from traceflow.importers.base import FileContext
from traceflow.importers.openclaw import IMPORTER

FIXTURE = Path(__file__).resolve().parent / "data" / "agent-logs" / "openclaw"


def test_model_changes_carry_across_imports_and_reset_transcripts_count() -> None:
    files = IMPORTER.discover(FIXTURE)
    assert [p.name.split(".jsonl")[1] for p in files] == ["", ".reset.2026-03-23T10-00-00.000Z"]
    path = files[0]
    lines = path.read_bytes().splitlines(keepends=True)
    state: dict[str, object] = {}
    first = IMPORTER.parse(b"".join(lines[:4]), FileContext(path=path, state=state))
    rest = IMPORTER.parse(b"".join(lines[4:]), FileContext(path=path, first_line=5, state=state))
    got = first.requests + rest.requests
    # m3 and m4 under the model_change's opus, m6 under the snapshot's sonnet; m7 has no token
    assert [r["model"] for r in got] == ["claude-opus-4-5", "claude-opus-4-5", "claude-sonnet-4-5"]
    m4 = got[1]  # input 3, output 402, cacheRead 24310, cacheWrite 1205, cost 0.0298
    assert (
        m4["cold_input_tokens"],
        m4["cache_read_tokens"],
        m4["cache_write_tokens"],
        m4["output_tokens"],
    ) == (
        3,
        24310,
        1205,
        402,
    )
    assert m4["ended_at"] == (1774166400000 + 29850) * 1000 and m4["cost_usd"] == 0.0298
    reset = IMPORTER.parse(files[1].read_bytes(), FileContext(path=files[1]))
    assert {r["session_id"] for r in reset.requests} == {"f0e1d2c3-b4a5-4968-8776-5a4b3c2d1e05"}
    assert reset.errors and reset.errors[0].line == 4
