"""The command line: `mix` and `sql` output contracts, filters and errors."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import EXAMPLES
from traceflow.analysis.mix import COLUMNS, SAVINGS
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]

ROWS = [
    # (event_id, agent, model, session, day, cold, read, write, output)
    ("a", "claude-code", "opus", "s1", 1, 10, 1000, 100, 50),
    ("b", "claude-code", "opus", "s1", 1, 0, 2000, 50, 20),
    ("c", "claude-code", "sonnet", "s2", 2, 5, 500, 500, 10),
    ("d", "codex", "gpt-5", "s3", 2, 100, 900, 0, 30),
]


@pytest.fixture
def filled(lake: Lake) -> Lake:
    lake.append(
        "requests",
        [
            {
                "event_id": e,
                "source": "test",
                "agent": agent,
                "model": model,
                "session_id": session,
                "user_id": "u1" if agent == "codex" else "u2",
                "started_at": 1785585600_000000 + day * 86_400_000_000,  # 2026-08-01T12:00Z + day
                "cold_input_tokens": cold,
                "cache_read_tokens": read,
                "cache_write_tokens": write,
                "output_tokens": out,
            }
            for e, agent, model, session, day, cold, read, write, out in ROWS
        ],
    )
    return lake


def expected(rows: list[tuple[object, ...]]) -> dict[str, float]:
    cold = sum(int(r[5]) for r in rows)  # type: ignore[call-overload]
    read = sum(int(r[6]) for r in rows)  # type: ignore[call-overload]
    write = sum(int(r[7]) for r in rows)  # type: ignore[call-overload]
    out = sum(int(r[8]) for r in rows)  # type: ignore[call-overload]
    total = cold + read + write + out
    return {
        "requests": len(rows),
        "cold_input_tokens": cold,
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "output_tokens": out,
        "total_tokens": total,
        "share_cold_input": cold / total,
        "share_cache_read": read / total,
        "share_cache_write": write / total,
        "share_output": out / total,
        "reuse_ratio": read / (cold + read + write),
    }


def test_mix_json_is_one_object_with_the_documented_keys(filled: Lake, cli: Cli) -> None:
    code, out, _ = cli("mix", "--format", "json")
    assert code == 0
    got = json.loads(out)
    assert list(got) == [*COLUMNS, *SAVINGS]
    assert {k: got[k] for k in COLUMNS} == pytest.approx(expected(ROWS))


def test_mix_by_several_groups_is_a_list_with_group_keys(filled: Lake, cli: Cli) -> None:
    code, out, _ = cli("mix", "--by", "agent", "--by", "model", "-f", "json")
    assert code == 0
    got = json.loads(out)
    assert [(g["agent"], g["model"]) for g in got] == [
        ("claude-code", "opus"),
        ("claude-code", "sonnet"),
        ("codex", "gpt-5"),
    ]
    for g in got:
        mine = [r for r in ROWS if r[1] == g["agent"] and r[2] == g["model"]]
        assert {k: g[k] for k in COLUMNS} == pytest.approx(expected(mine))


def test_mix_by_day_and_filters(filled: Lake, cli: Cli) -> None:
    _, out, _ = cli("mix", "--by", "day", "-f", "json")
    assert [g["day"] for g in json.loads(out)] == ["2026-08-02", "2026-08-03"]
    _, out, _ = cli("mix", "--since", "2026-08-03", "-f", "json")
    got = json.loads(out)
    assert {k: got[k] for k in COLUMNS} == pytest.approx(expected([r for r in ROWS if r[4] == 2]))
    _, out, _ = cli("mix", "--until", "2026-08-02", "--agent", "claude-code", "-f", "json")  # the whole day
    got = json.loads(out)
    assert {k: got[k] for k in COLUMNS} == pytest.approx(expected([r for r in ROWS if r[4] == 1]))
    _, out, _ = cli("mix", "--session", "s2", "--session", "s3", "-f", "json")
    assert json.loads(out)["requests"] == 2
    _, out, _ = cli("mix", "--user", "u1", "-f", "json")
    assert json.loads(out)["requests"] == 1


def test_mix_csv_markdown_and_table(filled: Lake, cli: Cli) -> None:
    _, out, _ = cli("mix", "--by", "model", "-f", "csv")
    parsed = list(csv.DictReader(io.StringIO(out)))
    assert [r["model"] for r in parsed] == ["gpt-5", "opus", "sonnet"]
    assert int(parsed[1]["cache_read_tokens"]) == 3000
    _, out, _ = cli("mix", "--by", "model", "-f", "markdown")
    assert out.splitlines()[0].startswith("| model | requests |")
    assert "| opus | 2 |" in out
    _, out, _ = cli("mix")
    assert "reuse_ratio" in out.splitlines()[0]


def test_mix_on_an_empty_lake_says_zero(cli: Cli) -> None:
    code, out, _ = cli("mix", "-f", "json")
    assert code == 0
    got = json.loads(out)
    assert got["requests"] == 0 and got["total_tokens"] == 0 and got["reuse_ratio"] is None


def test_mix_rejects_unknown_groups_and_formats(filled: Lake, cli: Cli) -> None:
    code, _, err = cli("mix", "--by", "colour")
    assert code == 2 and "choose from: agent, model, session, day, week, month, user" in err
    code, _, err = cli("mix", "-f", "xml")
    assert code == 2 and "table, json, csv, markdown" in err
    code, _, err = cli("mix", "--since", "yesterday-ish")
    assert code == 2 and "7d" in err


def test_sql_reads_the_views(filled: Lake, cli: Cli, tmp_path: Path) -> None:
    code, out, _ = cli(
        "sql",
        "SELECT model, sum(output_tokens)::BIGINT AS o FROM requests GROUP BY 1 ORDER BY 1",
        "-f",
        "json",
    )
    assert code == 0
    assert json.loads(out) == [
        {"model": "gpt-5", "o": 30},
        {"model": "opus", "o": 70},
        {"model": "sonnet", "o": 10},
    ]
    q = tmp_path / "q.sql"
    q.write_text("-- a comment\nSELECT count(*) AS n FROM requests WHERE agent = 'codex'\n")
    code, out, _ = cli("sql", "--file", str(q), "-f", "csv")
    assert out.splitlines() == ["n", "1"]


def test_sql_is_read_only_and_explains_bad_queries(filled: Lake, cli: Cli) -> None:
    code, _, err = cli("sql", "DELETE FROM requests")
    assert code == 2 and "read-only" in err
    code, _, err = cli("sql", "COPY requests TO '/tmp/x.csv'")
    assert code == 2 and "read-only" in err
    code, _, err = cli("sql", "SELECT input_tokens FROM requests")
    assert code == 1
    assert "requests(event_id" in err and "cold_input_tokens" in err and "metric_points(" in err
    assert count_rows(filled) == 4


def count_rows(lake: Lake) -> int:
    (n,) = lake.connect().execute("SELECT count(*) FROM requests").fetchone() or (0,)
    return int(n)


def test_console_script_and_module_entry_point(filled: Lake) -> None:
    env = {**os.environ, "TRACEFLOW_DATA": str(filled.root)}
    out = subprocess.run(
        [sys.executable, "-m", "traceflow", "mix", "-f", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(out.stdout)["requests"] == 4
    bad = subprocess.run(
        [sys.executable, "-m", "traceflow", "mix", "--by", "x"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and bad.stderr.startswith("traceflow: error:")


def test_version_option_exits_0_and_prints_the_version() -> None:
    from traceflow import __version__
    from traceflow.cli.app import app, register_all

    run = subprocess.run([sys.executable, "-m", "traceflow", "--version"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"traceflow {__version__}\n"
    register_all()
    result = CliRunner().invoke(app, ["--version"])  # the typer option too (after other options)
    assert result.exit_code == 0 and result.stdout.strip() == f"traceflow {__version__}"


def test_console_script_exit_codes(tmp_path: Path) -> None:
    env = {**os.environ, "TRACEFLOW_DATA": str(tmp_path / "data")}
    bad = tmp_path / "bad.jsonl"
    good = (EXAMPLES / "claude-transcript.jsonl").read_text()
    bad.write_text(good + "garbage\n")  # a bad line among good ones: skipped, exit 3
    run = subprocess.run(
        [sys.executable, "-m", "traceflow", "import", "claude-code", str(bad)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 3, run.stderr
    assert f"{bad}:{good.count(chr(10)) + 1}:" in run.stderr
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("garbage\n")  # nothing but bad lines: not a transcript at all, exit 2
    run = subprocess.run(
        [sys.executable, "-m", "traceflow", "import", "claude-code", str(garbage)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 2, run.stderr
    assert f"{garbage}:1:" in run.stderr and "Traceback" not in run.stderr
    refused = subprocess.run(
        [sys.executable, "-m", "traceflow", "serve", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env={k: v for k, v in env.items() if k != "TRACEFLOW_TOKEN"},
    )
    assert refused.returncode == 2
    assert "--token" in refused.stderr


# -- how the CLI is put together ------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[1] / "traceflow"


def _imports(path: Path) -> set[str]:
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_every_command_is_in_the_table_and_registered_from_it() -> None:
    import typer.main

    from traceflow.cli.app import COMMANDS, app, register_all

    register_all()
    assert list(typer.main.get_command(app).commands) == list(COMMANDS)  # type: ignore[attr-defined]
    for module in set(COMMANDS.values()):
        names = __import__(f"traceflow.cli.{module}", fromlist=["COMMANDS"]).COMMANDS
        assert sorted(names) == sorted(n for n, m in COMMANDS.items() if m == module)


def test_command_modules_do_not_import_the_app_and_the_library_not_the_cli() -> None:
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        if path.name != "app.py":
            assert "traceflow.cli.app" not in _imports(path), path.name
    library = [p for d in ("", "collectors", "dashboards") for p in (PACKAGE / d).resolve().rglob("*.py")]
    for path in library:
        if "cli" in path.parts or path.name == "_entry.py":  # _entry runs the CLI: the entry point
            continue
        assert not any(m == "traceflow.cli" or m.startswith("traceflow.cli.") for m in _imports(path)), path


def test_mix_imports_only_its_own_command_module(tmp_path: Path) -> None:
    env = {**os.environ, "TRACEFLOW_CACHE": "0"}
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "traceflow", "mix", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    assert "traceflow.cli.lake" in loaded
    assert not {"analyses", "dashboards", "sizing", "replay", "serve"} & {
        m.removeprefix("traceflow.cli.") for m in loaded if m.startswith("traceflow.cli.")
    }


def test_the_selection_options_come_where_the_command_declares_them() -> None:
    import typer.main

    from traceflow.cli.app import app, register_all

    register_all()
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    selection = ["since", "until", "agent", "model", "session", "user", "source", "where", "tz"]
    for name in ("mix", "gaps", "export", "size", "dashboard"):
        params = [p.name for p in commands[name].params]
        start = params.index("since")
        assert params[start : start + 9] == selection, name
        assert params[start + 9] == "data", name


def _commands_with_format() -> dict[str, bool]:
    """The commands that take ``--format``, each with whether it takes ``--data``."""
    import typer.main

    from traceflow.cli.app import app, register_all

    register_all()
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    return {
        name: any(p.name == "data" for p in command.params)
        for name, command in commands.items()
        if any("--format" in getattr(p, "opts", ()) for p in command.params)
    }


def test_many_commands_take_the_shared_format_option() -> None:
    # the parametrised test below must not pass by finding no command
    assert {"mix", "gaps", "sessions", "report", "export", "size", "check", "queries"} <= set(
        _commands_with_format()
    )


@pytest.mark.parametrize("command, data", _commands_with_format().items())
def test_every_format_option_refuses_an_unknown_format_before_doing_anything(
    cli: Cli, command: str, data: bool
) -> None:
    # no lake at --data: a command that got past option parsing would complain about the lake instead
    lake = ("--data", "/nonexistent/lake") if data else ()
    code, out, err = cli(command, "--format", "yaml", *lake, data=False)
    assert code == 2, (command, out, err)
    assert "--format 'yaml' is not one of: table, json, csv, markdown" in err + out, (command, err, out)


def test_only_config_reads_the_environment() -> None:
    import re

    reads = re.compile(r"os\.environ\b|getenv\(")
    allowed = {
        "config.py",  # the reader
        "result_cache.py",  # keys cached results by the whole environment; its setting goes via config
    }
    library = [p for d in ("", "collectors", "dashboards") for p in (PACKAGE / d).resolve().rglob("*.py")]
    found = sorted(str(p) for p in library if p.name not in allowed and reads.search(p.read_text()))
    assert found == []
