"""Kilo CLI importer on tests/data/agent-logs/kilo (sources: tests/data/SOURCES.md); numbers read off
the fixture's SQL by hand."""

from __future__ import annotations

from pathlib import Path

from tests.test_agents_ccusage import KILO_CHILD, KILO_PARENT, kilo_home
from traceflow.importers.base import FileContext
from traceflow.importers.kilo import IMPORTER
from traceflow.rows import stable_id


def test_kilo_rows_are_opencode_records_of_agent_kilo(tmp_path: Path) -> None:
    (db,) = IMPORTER.discover(kilo_home(tmp_path))
    got = {
        r["attributes"]["message_id"]: r
        for r in IMPORTER.parse(db.read_bytes(), FileContext(path=db)).requests
    }
    assert set(got) == {"msg_k02", "msg_k03", "msg_k04", "msg_k06", "msg_k07"}  # users' messages give none
    k04 = got["msg_k04"]  # no providerID: still a request (Kilo's gateway default)
    assert (k04["cold_input_tokens"], k04["cache_read_tokens"], k04["cache_write_tokens"]) == (4, 22620, 980)
    assert "provider" not in k04["attributes"]
    assert (k04["agent"], k04["source"], k04["event_id"]) == (
        "kilo",
        "kilo-db",
        stable_id("kilo-message", "msg_k04"),
    )
    k06 = got["msg_k06"]
    assert (k06["output_tokens"], k06["reasoning_tokens"]) == (640 + 1536, 1536)
    assert (k06["session_id"], k06["parent_session_id"]) == (KILO_CHILD, KILO_PARENT)
