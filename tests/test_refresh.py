"""Always current (docs/freshness.md): read commands first import what is new in the local agent logs
the lake imports; a lake fed by ``serve`` says how fresh it is.

The transcript is traceflow/examples/claude-transcript.jsonl, whose three requests are spelled out in
tests/data/agent-examples/README.md: req_011AAA (cold 2, read 15030, write 1200, output 260) and
req_011BBB (4, 16230, 310, 45) in its first eight lines, req_011CCC (6, 0, 16600, 30) in the last two.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.test_result_cache import entries, heavy_imports, run, settle
from traceflow.importers.refresh import folders, refresh, remember
from traceflow.store import local_logs
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
LINES = (EXAMPLES / "claude-transcript.jsonl").read_bytes().splitlines(keepends=True)
HEAD, TAIL = b"".join(LINES[:8]), b"".join(LINES[8:])
#: requests, cold input, cache read, cache write, output: after the first eight lines, and after all
FIRST = (2, 2 + 4, 15030 + 16230, 1200 + 310, 260 + 45)
ALL = (3, 2 + 4 + 6, 15030 + 16230 + 0, 1200 + 310 + 16600, 260 + 45 + 30)


def transcript(root: Path, project: str = "-home-u-proj", session: str = "s") -> Path:
    """``root/projects/<project>/<session>.jsonl`` holding the first eight lines of the example."""
    path = root / "projects" / project / f"{session}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(HEAD)
    return path


def watch(lake: Lake, root: Path) -> None:
    """What ``traceflow import claude-code root`` records (without importing: refresh() does)."""
    remember(lake, "claude-code", [root], folders([root]))


def mix(cli: Cli, *args: str, data: bool = True) -> tuple[int, ...]:
    code, out, err = cli("mix", "--format", "json", *args, data=data)
    assert code == 0, err
    doc = json.loads(out)
    return (
        doc["requests"],
        doc["cold_input_tokens"],
        doc["cache_read_tokens"],
        doc["cache_write_tokens"],
        doc["output_tokens"],
    )


def test_an_appended_line_is_in_the_next_report_without_an_import(cli: Cli, tmp_path: Path) -> None:
    path = transcript(tmp_path / "claude")
    code, _, err = cli("import", "claude-code", str(path.parent.parent))
    assert code == 0, err
    assert mix(cli) == FIRST
    with path.open("ab") as fh:
        fh.write(TAIL)
    assert mix(cli) == ALL  # no `import` in between
    # a new session in a new project folder is found too
    other = transcript(tmp_path / "claude", project="-home-u-other", session="t")
    other.write_bytes(HEAD.replace(b"req_011", b"req_999").replace(b'"msg_', b'"msg_999'))
    assert mix(cli)[0] == 5


def test_an_unchanged_file_is_not_read_again(lake: Lake, tmp_path: Path) -> None:
    one = transcript(tmp_path / "claude", session="one")
    transcript(tmp_path / "claude", project="-home-u-b", session="two")
    watch(lake, tmp_path / "claude" / "projects")
    (first,) = refresh(lake)
    assert (first.files_seen, first.files_read, first.bytes_read) == (2, 2, 2 * len(HEAD))
    assert local_logs.current(lake.state_dir)
    assert refresh(lake) == []  # nothing changed: no import ran, nothing was read
    with one.open("ab") as fh:
        fh.write(TAIL)
    assert not local_logs.current(lake.state_dir)
    (grown,) = refresh(lake)
    # the grown file only (the other was not even planned), and of it only the appended bytes
    assert (grown.files_seen, grown.files_read, grown.bytes_read) == (1, 1, len(TAIL))
    assert grown.rows["requests"] == 1
    assert refresh(lake) == []


def test_a_file_in_a_new_folder_makes_the_logs_stale(lake: Lake, tmp_path: Path) -> None:
    transcript(tmp_path / "claude")
    watch(lake, tmp_path / "claude" / "projects")
    refresh(lake)
    assert local_logs.current(lake.state_dir)
    transcript(tmp_path / "claude", project="-home-u-new", session="n")
    assert not local_logs.current(lake.state_dir)


def test_no_refresh_and_the_setting_turn_it_off(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = transcript(tmp_path / "claude")
    cli("import", "claude-code", str(path.parent.parent))
    with path.open("ab") as fh:
        fh.write(TAIL)
    assert mix(cli, "--no-refresh") == FIRST
    monkeypatch.setenv("TRACEFLOW_REFRESH", "0")
    assert mix(cli) == FIRST
    code, out, _ = cli("sql", "SELECT count(*) AS n FROM requests", "--format", "json")
    assert code == 0 and json.loads(out) == [{"n": 2}]
    monkeypatch.delenv("TRACEFLOW_REFRESH")
    assert mix(cli) == ALL


def test_a_lake_without_local_logs_is_not_refreshed(cli: Cli, lake: Lake, tmp_path: Path) -> None:
    path = transcript(tmp_path / "claude")
    from traceflow.importers import get
    from traceflow.importers.run import run_import

    run_import(lake, get("claude-code"), [path])  # the library, not `traceflow import`: no marker
    with path.open("ab") as fh:
        fh.write(TAIL)
    assert mix(cli) == FIRST


def test_the_default_lake_is_filled_from_the_agents_folder(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = transcript(tmp_path / "claude")
    monkeypatch.delenv("TRACEFLOW_DATA", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "no-codex"))
    monkeypatch.setenv("GEMINI_DIR", str(tmp_path / "no-gemini"))
    assert mix(cli, data=False) == FIRST  # the default lake did not exist: created and filled
    assert (tmp_path / "xdg" / "traceflow" / "v1" / "requests").is_dir()
    with path.open("ab") as fh:
        fh.write(TAIL)
    assert mix(cli, data=False) == ALL


def test_the_result_cache_serves_no_answer_the_logs_outdated(lake: Lake, tmp_path: Path) -> None:
    """The cache's fast path checks the logs first (before the fix it served the stored answer: the
    lake itself had not changed yet)."""
    path = transcript(tmp_path / "claude")
    watch(lake, tmp_path / "claude" / "projects")
    refresh(lake)
    settle(lake)
    args = ["mix", "--format", "json"]
    first = run(lake, *args, module=True)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["requests"] == 2
    assert entries(lake)  # stored: the next run with nothing new is a hit
    hit = run(lake, *args, module=True, importtime=True)
    assert hit.stdout == first.stdout
    assert heavy_imports(hit.stderr) == []  # the logs checked with stats, then the stored answer
    with path.open("ab") as fh:
        fh.write(TAIL)
    second = run(lake, *args, module=True)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["requests"] == 3


# -- a lake fed by serve ----------------------------------------------------------------------

T0 = dt.datetime(2026, 8, 1, 12, 0, tzinfo=dt.UTC)


def serve_lake(lake: Lake) -> Lake:
    lake.append(
        "requests",
        [
            {
                "event_id": f"r{i}",
                "source": "otlp",
                "agent": "claude-code",
                "model": "opus",
                "session_id": "s1",
                "started_at": int((T0 + dt.timedelta(seconds=i)).timestamp() * 1_000_000),
                "cold_input_tokens": 1,
                "cache_read_tokens": 10,
                "cache_write_tokens": 0,
                "output_tokens": 2,
            }
            for i in range(4)
        ],
    )
    (lake.state_dir / "collector").mkdir(parents=True, exist_ok=True)  # what `serve` keeps there
    return lake


def test_a_serve_fed_lake_says_how_fresh_it_is(cli: Cli, lake: Lake) -> None:
    serve_lake(lake)
    newest = T0 + dt.timedelta(seconds=3)
    code, out, err = cli("mix", "--by", "day")
    assert code == 0, err
    assert out.rstrip("\n").splitlines()[-1].startswith("fresh as of: newest record 2026-08-01 12:00:03 UTC")
    code, out, err = cli("mix", "--format", "json")
    assert code == 0, err
    fresh = json.loads(out)["freshness"]
    assert fresh["fed_by"] == "serve"
    assert dt.datetime.fromisoformat(fresh["newest_record"]) == newest
    age = (dt.datetime.now(dt.UTC) - newest).total_seconds()
    assert age - 60 < fresh["age_s"] <= age
    code, out, err = cli("report")
    assert code == 0, err
    assert out.splitlines()[0].startswith("fresh as of: newest record 2026-08-01 12:00:03 UTC")


def test_the_freshness_line_is_its_commands_own(cli: Cli, lake: Lake) -> None:
    """The freshness of a serve-fed lake goes to what its command prints and stays there: the
    library, called after that command in the same process, prints no freshness (it did while the
    line was module state)."""
    from traceflow.output import Rows, render

    serve_lake(lake)
    code, out, err = cli("mix", "--by", "day")
    assert code == 0 and "fresh as of" in out, err
    rows = Rows(["model", "requests"], [("opus", 4)])
    assert "fresh as of" not in render(rows, "table")
    assert "freshness" not in json.loads(render(rows, "json", single=True))


def test_other_lakes_print_no_freshness(cli: Cli, lake: Lake) -> None:
    serve_lake(lake)
    shutil.rmtree(lake.state_dir / "collector")
    code, out, _ = cli("mix", "--format", "json")
    assert code == 0 and "freshness" not in json.loads(out)
    code, out, _ = cli("mix")
    assert code == 0 and "fresh as of" not in out
    assert not os.path.exists(local_logs.marker_path(lake.state_dir))
