"""The usage ledger (traceflow/importers/claude_code_usage.py) against the lake it stands in for.

``traceflow daily|weekly|monthly|session --json`` answer from the ledger on a lake that reads only
local Claude Code transcripts (traceflow/cli/usage_fast.py). The lake's answer, through the CLI
(typer, the refresh, DuckDB), is the oracle: every document must be the same, byte for byte, on a
generated history (benchmarks/gen_claude_corpus.py) with hand-made awkward lines added, in several
zones, after lines are appended (the ledger then reads only the new bytes), and the ledger must stand
aside where it cannot give the lake's answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, corpus_generator
from tests.test_result_cache import heavy_imports, run
from traceflow.cli import usage_fast
from traceflow.importers.claude_code_usage import Ledger, Unsupported, covered
from traceflow.importers.refresh import folders, remember
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]
REPO = Path(__file__).resolve().parent.parent
VIEWS = ("daily", "weekly", "monthly", "session")
EXAMPLE = (EXAMPLES / "claude-transcript.jsonl").read_bytes()
SESSION = "0a9a8045-53e9-44b1-83fb-aafc6e1f4f0b"


def _line(**fields: object) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode() + b"\n"


def _assistant(rid: str | None, mid: str | None, ts: str, out: int, **extra: object) -> bytes:
    usage = {
        "input_tokens": 3,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 50,
        "output_tokens": out,
    }
    message: dict[str, object] = {"model": "claude-sonnet-4-5-20250929", "usage": usage}
    if mid is not None:
        message["id"] = mid
    fields: dict[str, object] = {
        "type": "assistant",
        "sessionId": SESSION,
        "timestamp": ts,
        "message": message,
    }
    if rid is not None:
        fields["requestId"] = rid
    fields.update(extra)
    return _line(**fields)


#: Awkward lines: copies with equal totals at other times (the last read wins), a request known by
#: its message id only and one by neither, a synthetic error, invalid JSON, invalid UTF-8, a user line
#: quoting a sub-agent's usage, spaced JSON, non-ASCII text, a request copied into another file.
AWKWARD = b"".join(
    [
        _assistant("req_T1", "msg_T1", "2026-04-02T14:59:59.000Z", 7),
        _assistant("req_T1", "msg_T1", "2026-04-02T15:00:01.000Z", 7),  # same total, after Tokyo's midnight
        _assistant(None, "msg_only", "2026-04-03T01:00:00.000Z", 9),
        _assistant(None, None, "2026-04-03T02:00:00.000Z", 11),
        _assistant("req_syn", "msg_syn", "2026-04-03T03:00:00.000Z", 0).replace(
            b"claude-sonnet-4-5-20250929", b"<synthetic>"
        ),
        b'{"type":"assistant","requestId":"req_bad","message":{"usage":{"input_tokens":1}\n',
        _assistant("req_utf", "msg_utf", "2026-04-03T04:00:00.000Z", 5).replace(
            b'"type"', b'"x":"\xff","type"'
        ),
        _line(
            type="user",
            sessionId=SESSION,
            timestamp="2026-04-03T05:00:00.000Z",
            message={"role": "user", "content": [{"type": "tool_result", "content": "done"}]},
            toolUseResult={"usage": {"input_tokens": 999, "output_tokens": 999}},
        ),
        json.dumps(
            json.loads(_assistant("req_sp", "msg_sp", "2026-04-03T06:00:00.000Z", 13)),
            separators=(", ", ": "),
        ).encode()
        + b"\n",
        _assistant("req_uni", "msg_uni", "2026-04-03T07:00:00.000Z", 17, cwd="/home/ü/日本"),
        _assistant("req_opus", "msg_opus", "2026-04-03T08:00:00.000Z", 19).replace(
            b"claude-sonnet-4-5-20250929", b"claude-opus-4-5-20251101"
        ),
        _assistant("req_nomodel", "msg_nomodel", "2026-04-03T09:00:00.000Z", 23).replace(
            b'"model":"claude-sonnet-4-5-20250929",', b""
        ),
    ]
)
#: The same requests again in another file (a sub-agent's copy): totals equal, times later.
COPIES = b"".join(
    [
        _assistant("req_opus", "msg_opus", "2026-04-04T08:00:00.000Z", 19, isSidechain=True, agentId="x1"),
        _assistant("req_T1", "msg_T1", "2026-04-01T00:00:00.000Z", 5, isSidechain=True, agentId="x1"),
        _assistant("req_gen", "msg_gen", "2026-04-04T09:00:00.000Z", 3, isSidechain=True, agentId="x1"),
    ]
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("claude")
    corpus_generator().generate_corpus(root, 0.3, 11)  # type: ignore[attr-defined]
    odd = root / "projects" / "-home-u-odd"
    odd.mkdir()
    (odd / f"{SESSION}.jsonl").write_bytes(EXAMPLE + AWKWARD)
    (odd / SESSION / "subagents").mkdir(parents=True)
    (odd / SESSION / "subagents" / "agent-x1.jsonl").write_bytes(COPIES)
    return root


@pytest.fixture
def logs(corpus: Path, tmp_path: Path) -> Path:
    """A private copy of the corpus (tests append to it)."""
    import shutil

    shutil.copytree(corpus, tmp_path / "claude")
    return tmp_path / "claude" / "projects"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[None]:
    """No default folders of other agents; the settings that would change an answer unset."""
    mp = pytest.MonkeyPatch()
    for key in list(os.environ):
        if key.startswith("TRACEFLOW_"):
            mp.delenv(key)
    mp.setenv("CODEX_HOME", str(tmp_path / "no-codex"))
    mp.setenv("GEMINI_DIR", str(tmp_path / "no-gemini"))
    yield
    mp.undo()


def lake_doc(cli: Cli, view: str, *args: str) -> str:
    """The lake's document (the CLI: refresh, then DuckDB; ``--breakdown`` keeps the fast path off)."""
    code, out, err = cli(view, "--json", "--breakdown", *args)
    assert code == 0, err
    return out.rstrip("\n")


def ledger_doc(lake: Lake, view: str, tz: str, order: str | None = None) -> str:
    text = usage_fast.answer(view, str(lake.root), tz, order, None)
    assert text is not None, "the ledger stood aside"
    return text


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo", "America/St_Johns", "Asia/Kathmandu"])
def test_every_view_is_the_lakes_in_every_zone(cli: Cli, lake: Lake, logs: Path, env: None, tz: str) -> None:
    remember(lake, "claude-code", [logs], folders([logs]))
    for view in VIEWS:
        expected = lake_doc(cli, view, "--timezone", tz)
        assert ledger_doc(lake, view, tz) == expected, view
    assert ledger_doc(lake, "session", tz, "asc") == lake_doc(
        cli, "session", "--timezone", tz, "--order", "asc"
    )
    doc = json.loads(ledger_doc(lake, "daily", tz))
    assert doc["traceflow"]["requests"] > 40  # the corpus, not an empty answer


def test_a_fresh_ledger_then_appended_lines_read_only_the_new_bytes(
    cli: Cli, lake: Lake, logs: Path, env: None
) -> None:
    remember(lake, "claude-code", [logs], folders([logs]))
    first = ledger_doc(lake, "daily", "Asia/Tokyo")  # the ledger first, on an empty lake
    assert first == lake_doc(cli, "daily", "--timezone", "Asia/Tokyo")
    target = logs / "-home-u-odd" / f"{SESSION}.jsonl"
    size = target.stat().st_size
    appended = b"".join(
        [
            _assistant("req_T1", "msg_T1", "2026-04-05T00:00:00.000Z", 7),  # equal total, read last: wins
            _assistant("req_new", "msg_new", "2026-04-05T01:00:00.000Z", 29),
            _assistant("req_opus", "msg_opus", "2026-04-05T02:00:00.000Z", 20),  # more complete: wins
            # as complete as the sub-agent file's copy, in a file named before it: the later read wins
            _assistant("req_gen", "msg_gen", "2026-04-05T03:00:00.000Z", 3),
        ]
    )
    with target.open("ab") as fh:
        fh.write(appended)
    ledger = Ledger.load(str(lake.state_dir), [str(logs.resolve())])
    assert ledger.update() == len(appended)  # only the new bytes
    assert ledger.files[str(target.resolve())][2] == size + len(appended)
    for view in VIEWS:
        assert ledger_doc(lake, view, "Asia/Tokyo") == lake_doc(cli, view, "--timezone", "Asia/Tokyo"), view


def test_a_half_written_last_line_waits(cli: Cli, lake: Lake, logs: Path, env: None) -> None:
    remember(lake, "claude-code", [logs], folders([logs]))
    target = logs / "-home-u-odd" / f"{SESSION}.jsonl"
    line = _assistant("req_half", "msg_half", "2026-04-06T00:00:00.000Z", 31)
    with target.open("ab") as fh:
        fh.write(line[:40])
    assert "2026-04-06" not in ledger_doc(lake, "daily", "UTC")
    with target.open("ab") as fh:
        fh.write(line[40:])
    doc = ledger_doc(lake, "daily", "UTC")
    assert '"period": "2026-04-06"' in doc
    assert doc == lake_doc(cli, "daily", "--timezone", "UTC")


def test_the_ledger_stands_aside_for_a_lake_with_other_data(
    cli: Cli, lake: Lake, logs: Path, env: None, tmp_path: Path
) -> None:
    remember(lake, "claude-code", [logs], folders([logs]))
    lake_doc(cli, "daily")  # the refresh fills the lake: still covered
    assert covered(str(lake.root), str(lake.state_dir))
    assert usage_fast.answer("daily", str(lake.root), "UTC", None, None) is not None
    other = tmp_path / "other.jsonl"
    other.write_bytes(EXAMPLE.replace(b"req_011", b"req_777").replace(b'"msg_', b'"msg_777'))
    code, _, err = cli("import", "claude-code", str(other))  # an import by hand: not a refresh
    assert code == 0, err
    assert not covered(str(lake.root), str(lake.state_dir))
    with pytest.raises(Unsupported):
        usage_fast.answer("daily", str(lake.root), "UTC", None, None)


def test_a_request_line_without_its_session_sends_the_view_to_the_lake(
    lake: Lake, tmp_path: Path, env: None
) -> None:
    root = tmp_path / "claude" / "projects" / "p"
    root.mkdir(parents=True)
    (root / "s.jsonl").write_bytes(
        _assistant("r", "m", "2026-04-02T00:00:00.000Z", 1).replace(b'"sessionId"', b'"x"')
    )
    remember(lake, "claude-code", [root.parent], folders([root.parent]))
    with pytest.raises(Unsupported):
        usage_fast.answer("daily", str(lake.root), "UTC", None, None)


def test_the_command_uses_the_ledger_without_heavy_imports(lake: Lake, logs: Path, env: None) -> None:
    remember(lake, "claude-code", [logs], folders([logs]))
    out = run(lake, "daily", "--json", "--timezone", "UTC", module=True, importtime=True)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert heavy_imports(out.stderr) == []  # no typer, DuckDB, polars or pyarrow
    assert (lake.state_dir / "imports" / "usage-requests.msgpack").is_file()
    first = json.loads(out.stdout)
    assert first["traceflow"]["requests"] > 40
    again = run(lake, "daily", "--json", "--timezone", "UTC", module=True, importtime=True)
    assert again.stdout == out.stdout  # the stored answer ...
    assert "traceflow.analysis" not in again.stderr.decode()  # ... not computed again
    with (logs / "-home-u-odd" / f"{SESSION}.jsonl").open("ab") as fh:
        fh.write(_assistant("req_late", "msg_late", "2026-04-07T00:00:00.000Z", 37))
    grown = json.loads(run(lake, "daily", "--json", "--timezone", "UTC", module=True).stdout)
    assert grown["traceflow"]["requests"] == first["traceflow"]["requests"] + 1  # not the stored answer


def test_requests_that_are_not_the_index_s_are_read_again(
    cli: Cli, lake: Lake, logs: Path, env: None
) -> None:
    """A crash between the two files' writes: the ledger starts again from the transcripts."""
    remember(lake, "claude-code", [logs], folders([logs]))
    before = ledger_doc(lake, "daily", "UTC")
    requests = lake.state_dir / "imports" / "usage-requests.msgpack"
    saved = requests.read_bytes()
    with (logs / "-home-u-odd" / f"{SESSION}.jsonl").open("ab") as fh:
        fh.write(_assistant("req_late", "msg_late", "2026-04-07T00:00:00.000Z", 37))
    ledger_doc(lake, "daily", "UTC")
    requests.write_bytes(saved)  # the index is a generation ahead of the requests
    assert ledger_doc(lake, "daily", "UTC") == lake_doc(cli, "daily", "--timezone", "UTC") != before
