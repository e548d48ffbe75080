"""Wrong input fails loudly: exit status 2, one message naming the problem and the fix, no traceback.

Each case runs the console script's entry point (``traceflow.cli.app.main``) in this process, with the
environment and arguments a user's shell would give it; an exception that escapes it is written to
stderr as the real process would print it. A few cases run the real process (``process=True``): its
exit status and stderr as a user sees them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import EXAMPLES, TESTDATA

TRANSCRIPT = EXAMPLES / "claude-transcript.jsonl"


def traceflow(*args: str, tmp_path: Path, process: bool = False) -> subprocess.CompletedProcess[str]:
    """``traceflow ARGS`` over the lake ``tmp_path/lake``: in this process (the console script's own
    ``main``, so the same one-line messages and exit codes), or with ``process`` as a subprocess (the
    real process: its exit status and its stderr as a user sees them)."""
    env = {**os.environ, "TRACEFLOW_DATA": str(tmp_path / "lake"), "TRACEFLOW_CACHE": "0"}
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_DIR"):
        env.pop(name, None)
    env["HOME"] = str(tmp_path / "home")  # no agent logs in the default locations
    if process:
        return subprocess.run(
            [sys.executable, "-m", "traceflow", *args], capture_output=True, text=True, env=env, timeout=120
        )
    from traceflow.cli.app import main

    unset = {name: None for name in os.environ if name not in env}
    code: int | str | None = 0
    with CliRunner().isolation(env={**env, **unset}) as (out, err, _), _argv("traceflow", *args):
        try:
            main()
        except SystemExit as e:
            code = e.code
        except Exception:  # what the real process would print: the check below must see it
            sys.stderr.write(traceback.format_exc())
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(list(args), returncode, stdout, stderr)


@contextlib.contextmanager
def _argv(*argv: str) -> Iterator[None]:
    saved = sys.argv
    sys.argv = list(argv)
    try:
        yield
    finally:
        sys.argv = saved


def assert_refused(run: subprocess.CompletedProcess[str], *words: str) -> None:
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    assert run.stderr.startswith("traceflow: error: "), run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    for word in words:
        assert word in run.stderr, (word, run.stderr)


@pytest.fixture
def mooncake_file(tmp_path: Path) -> Path:
    path = tmp_path / "conversation_trace.jsonl"
    with open(TESTDATA / "mooncake_conversation_trace.jsonl") as fh:
        path.write_text("".join(next(fh) for _ in range(20)))
    return path


@pytest.fixture
def transcripts(tmp_path: Path) -> Path:
    folder = tmp_path / "projects" / "proj"
    folder.mkdir(parents=True)
    (folder / "session.jsonl").write_text(TRANSCRIPT.read_text())
    return folder.parent


def test_an_importer_that_finds_no_file_of_its_format(tmp_path: Path, transcripts: Path) -> None:
    run = traceflow("import", "codex", str(transcripts), tmp_path=tmp_path, process=True)
    assert_refused(run, f"no codex files under {transcripts}", "rollout-*.jsonl", "import claude-code")


@pytest.mark.parametrize("source", ["claude-code", "codex", "gemini"])
def test_an_agent_file_of_another_format(tmp_path: Path, mooncake_file: Path, source: str) -> None:
    run = traceflow("import", source, str(mooncake_file), tmp_path=tmp_path)
    assert_refused(run, f"{mooncake_file} is not a {source} file", "traceflow import --help")
    # the files were not booked as read: the right importer still reads them
    ok = traceflow("import", "mooncake", str(mooncake_file), tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stderr


TRACE_SOURCES = ["mooncake", "otlp-json", "bailian", "azure", "burstgpt", "kvcache-tester"]


@pytest.mark.parametrize("source", TRACE_SOURCES)
def test_a_trace_file_whose_every_record_is_rejected(tmp_path: Path, source: str) -> None:
    run = traceflow("import", source, str(TRANSCRIPT), tmp_path=tmp_path)
    assert_refused(run, "nothing imported", f"not {source} files", f"{TRANSCRIPT}:1:")


def test_a_good_file_with_a_bad_line_still_imports(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(TRANSCRIPT.read_text() + "{oops\n")
    run = traceflow("import", "claude-code", str(path), tmp_path=tmp_path, process=True)
    assert run.returncode == 3 and "3 requests" in run.stdout, run.stderr


def test_a_source_without_a_default_location(tmp_path: Path) -> None:
    for source in ("mooncake", "azure", "otlp-json"):
        run = traceflow("import", source, tmp_path=tmp_path)
        assert_refused(run, f"{source} has no default location", f"traceflow import {source} PATH")
    run = traceflow("import", "codex", tmp_path=tmp_path)  # an agent whose folder is not there
    assert_refused(run, "no codex logs found in the default location", "traceflow import codex PATH")


@pytest.mark.parametrize("command", [["mix"], ["gaps"], ["sessions"], ["sql", "SELECT 1"], ["report"]])
def test_a_read_command_never_creates_a_lake(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nope"
    run = traceflow(*command, "--data", str(missing), tmp_path=tmp_path, process=command == ["mix"])
    assert_refused(run, f"no lake at {missing}", "traceflow import")
    assert not missing.exists()


def test_sql_file_missing_or_a_directory(tmp_path: Path) -> None:
    traceflow("import", "claude-code", str(TRANSCRIPT), tmp_path=tmp_path)
    run = traceflow("sql", "--file", str(tmp_path / "nope.sql"), tmp_path=tmp_path)
    assert_refused(run, "nope.sql does not exist", ".sql file")
    run = traceflow("sql", "--file", str(tmp_path), tmp_path=tmp_path)
    assert_refused(run, "is a directory", ".sql file")


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """The default lake of :func:`traceflow` (``TRACEFLOW_DATA``), holding one Claude Code session."""
    run = traceflow("import", "claude-code", str(TRANSCRIPT), tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr
    return tmp_path / "lake"


#: Commands that write one file, with ``{out}`` where its path goes.
FILE_WRITERS = {
    "export": ["export", "mooncake", "-o", "{out}"],
    "synth": ["synth", "--duration", "5m", "--export", "aiperf", "-o", "{out}"],
    "fit": ["fit", "-o", "{out}"],
    "snapshot": ["snapshot", "{out}"],
    "report": ["report", "--html", "{out}"],
}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("command", FILE_WRITERS)
def test_an_output_file_that_is_a_directory(tmp_path: Path, lake: Path, command: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = traceflow(*(a.replace("{out}", str(out)) for a in FILE_WRITERS[command]), tmp_path=tmp_path)
    assert_refused(run, f"{out} is a directory", str(out / ""))
    assert _leftovers(tmp_path) == [] and list(out.iterdir()) == []  # no temporary file beside it


@pytest.mark.parametrize("command", FILE_WRITERS)
def test_an_output_file_whose_folder_cannot_be_made(tmp_path: Path, lake: Path, command: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = blocker / "sub" / "out.x"
    run = traceflow(*(a.replace("{out}", str(out)) for a in FILE_WRITERS[command]), tmp_path=tmp_path)
    assert_refused(run, f"cannot create the folder {blocker / 'sub'}", "writable")
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("command", FILE_WRITERS)
def test_an_output_file_in_a_missing_folder(tmp_path: Path, lake: Path, command: str) -> None:
    out = tmp_path / "no-such-dir" / "out.x"
    run = traceflow(*(a.replace("{out}", str(out)) for a in FILE_WRITERS[command]), tmp_path=tmp_path)
    assert_refused(run, f"the folder {out.parent} does not exist", f"mkdir -p {out.parent}")
    assert not out.parent.exists()  # a mistyped path leaves no new folder behind


@contextlib.contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """``folder`` refuses new files for the duration, as a user's read-only lake would: by its mode for
    an ordinary user; as root (whom modes do not stop) made immutable, else bind-mounted read-only."""
    if os.geteuid() != 0:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(mode)
        return
    for on, off in (
        (["chattr", "+i", str(folder)], ["chattr", "-i", str(folder)]),
        (["mount", "--bind", "-o", "ro", str(folder), str(folder)], ["umount", str(folder)]),
    ):
        if shutil.which(on[0]) and subprocess.run(on, capture_output=True).returncode == 0:
            try:
                yield
            finally:
                subprocess.run(off, check=True)
            return
    pytest.skip("running as root without chattr or mount: no way to make a folder unwritable")


@pytest.mark.parametrize("command", ["import", "compact"])
def test_a_lake_that_cannot_be_written(tmp_path: Path, lake: Path, command: str) -> None:
    args = (
        ["import", "mooncake", str(TESTDATA / "mooncake_synthetic_trace.jsonl")]
        if command == "import"
        else ["compact"]
    )
    before = sorted(p.relative_to(lake) for p in lake.rglob("*"))
    with unwritable(lake / "v1"):
        run = traceflow(*args, tmp_path=tmp_path)
    assert_refused(run, f"cannot write the lake at {lake}", f"traceflow {command}", "--data DIR")
    assert sorted(p.relative_to(lake) for p in lake.rglob("*")) == before


@pytest.mark.parametrize("option", ["--png", "--svg"])
def test_a_chart_folder_that_is_a_file(tmp_path: Path, lake: Path, option: str) -> None:
    path = tmp_path / "charts.txt"
    path.write_text("keep me")
    run = traceflow("report", option, str(path), tmp_path=tmp_path)
    assert_refused(run, f"{option} {path} is a file", "folder")
    assert path.read_text() == "keep me"


@pytest.fixture
def not_utf8(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["ttl", "--prices", "{path}"],
        ["size", "--config", "{path}", "--rate", "1"],
        ["synth", "--profile", "{path}", "--duration", "5m"],
    ],
    ids=["prices", "config", "profile"],
)
def test_an_input_file_that_is_not_utf8_or_a_directory(
    tmp_path: Path, lake: Path, not_utf8: Path, args: list[str]
) -> None:
    option = args[1]
    run = traceflow(*(a.replace("{path}", str(not_utf8)) for a in args), tmp_path=tmp_path)
    assert_refused(run, f"{option} {not_utf8}", "UTF-8")
    run = traceflow(*(a.replace("{path}", str(tmp_path)) for a in args), tmp_path=tmp_path)
    assert_refused(run, f"{option} {tmp_path} is a directory")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rated-dwpd", "0"], ["--rated-dwpd 0", "positive"]),
        (["--warranty-years", "0"], ["--warranty-years 0", "positive"]),
        (["--waf", "0"], ["--waf 0", "positive"]),
        (["--drive-size", "0"], ["--drive-size 0", "positive"]),
        (["--sessions", "-1"], ["--sessions -1", "0 or more"]),
        (["--input-rate", "-1"], ["--input-rate -1", "0 or more"]),
        (["--rate", "-5"], ["--rate -5", "0 or more"]),
    ],
)
def test_size_numbers_out_of_range(tmp_path: Path, args: list[str], words: list[str]) -> None:
    run = traceflow("size", "--kv-model", "Llama-3.1-8B", "--rate", "100", *args, tmp_path=tmp_path)
    assert_refused(run, *words)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--block-size", "0"], ["--block-size 0", "at least 1"]),
        (["--prefill-rate", "0"], ["--prefill-rate 0", "positive"]),
        (["--prefill-rate", "-5"], ["--prefill-rate -5", "positive"]),
    ],
)
def test_simulate_numbers_out_of_range(tmp_path: Path, args: list[str], words: list[str]) -> None:
    base = ["simulate", "--kv-model", "Llama-3.1-8B", "--workload", "agentic-coding", "--duration", "1m"]
    assert_refused(traceflow(*base, *args, tmp_path=tmp_path), *words)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["sessions", "--list", "--limit", "-1"], ["--limit -1", "at least 1"]),
        (["sessions", "--list", "--limit", "0"], ["--limit 0", "at least 1"]),
        (["misses", "--miss-tokens", "-1"], ["--miss-tokens -1", "0 or more"]),
        (["misses", "--compaction-drop", "-1"], ["--compaction-drop -1", "between 0 and 1"]),
        (["synth", "--duration", "5m", "--limit", "0"], ["--limit 0", "at least 1"]),
        (["synth", "--duration", "5m", "--limit", "-1"], ["--limit -1", "at least 1"]),
        (["mix", "--since", "2026-02-01", "--until", "2026-01-01"], ["--since", "--until", "before"]),
    ],
)
def test_numbers_and_windows_that_select_nothing(
    tmp_path: Path, lake: Path, args: list[str], words: list[str]
) -> None:
    assert_refused(traceflow(*args, tmp_path=tmp_path), *words)


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--http-port", "99999", "--grpc-port", "-1"],
        ["serve", "--http-port", "-1", "--grpc-port", "70000"],
        ["dashboard", "--port", "99999"],
        ["dashboard", "--port", "-5"],
    ],
)
def test_a_port_out_of_range(tmp_path: Path, lake: Path, args: list[str]) -> None:
    port = args[args.index("--grpc-port" if args[-1] == "70000" else args[1]) + 1]
    assert_refused(traceflow(*args, tmp_path=tmp_path), port, "65535")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("check", "--baseline-days", "100000000"), ("--baseline-days", "fewer days")),
        (("mix", "--since", "99999999d"), ("--since", "99999999d", "shorter age")),
        (("mix", "--until", "99999999d"), ("--until", "99999999d", "shorter age")),
        (("mix", "--by", "day", "--tz", "posixrules"), ("posixrules", "not a time zone")),
        (("mix", "--by", "day", "--tz", "localtime"), ("localtime", "not a time zone", "local")),
        (("mix", "--by", "day", "--tz", "right/UTC"), ("right/UTC", "not a time zone")),
        (("blocks", "--live", "--interval", "nan"), ("--interval nan",)),
        (("blocks", "--live", "--interval", "inf"), ("--interval inf",)),
    ],
)
def test_out_of_range_values_are_one_line(
    args: tuple[str, ...], words: tuple[str, ...], tmp_path: Path, transcripts: Path
) -> None:
    """Values that overflow a date, zones DuckDB does not know, a NaN interval (issue 33): exit 2 and
    one line, over a lake with requests (an empty lake would never reach the query)."""
    assert traceflow("import", "claude-code", str(transcripts), tmp_path=tmp_path).returncode == 0
    assert_refused(traceflow(*args, tmp_path=tmp_path), *words)


def test_every_zone_resolve_takes_is_one_duckdb_knows() -> None:
    """Each name of this machine's zone folder that ``--tz`` takes, DuckDB knows (``--by day`` runs in
    it); the IANA names among them are all taken."""
    import zoneinfo

    import duckdb

    from traceflow.store.zones import _known

    duck = {r[0] for r in duckdb.connect().execute("SELECT name FROM pg_timezone_names()").fetchall()}
    folder = Path(zoneinfo.TZPATH[0]) if zoneinfo.TZPATH else None
    names = set(zoneinfo.available_timezones()) | {"posixrules", "localtime", "right/UTC", "posix/UTC"}
    if folder is not None and folder.is_dir():
        names |= {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    taken = {n for n in names if _known(n)}
    assert taken <= duck, sorted(taken - duck)[:20]
    assert set(zoneinfo.available_timezones()) - {"localtime"} <= taken
