"""Every command example of the manual (README.md and the pages under docs/) runs as written, and the
numbers the manual quotes come from that run.

The examples are read from the documents themselves: every line of a fenced ```bash block, and every line
that starts with ``traceflow`` or ``python`` in a plain fenced block (``\\`` continuations joined, a
trailing ``# comment`` dropped). Each runs in-process (the typer app, as ``traceflow ...`` would) with
its words unchanged:

- in a working directory that holds the files the examples name (``PATHS`` below: a path the manual
  names and the test data it stands for, or what the test writes there), and
- with ``TRACEFLOW_DATA`` pointing at a small lake built once from ``tests/data`` by the manual's commands
  (``LAKE_COMMANDS``), so that no ``--data`` is added to any example.

An example that cannot run here is listed in ``NOT_RUN`` with the reason; an example found in neither
the runs nor ``NOT_RUN`` fails the test, so none is skipped silently. The ``test_*`` functions below
check each number the manual quotes after an example against that example's run. The generated
command reference (``docs/hooks.py``) holds no examples: it is the CLI's own help.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import TESTDATA

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
#: The manual: the README, then every page of the site (docs/*.md, in name order).
DOCUMENTS = {"README.md": README} | {
    f"docs/{p.name}": p.read_text() for p in sorted((REPO / "docs").glob("*.md"))
}
MANUAL = "\n\n".join(DOCUMENTS.values())

#: A path the manual names -> what the working directory holds under that name (a test-data file, or text
#: written).
PATHS: dict[str, Path | str] = {
    # `traceflow simulate --trace conversation_trace.jsonl` and the import table's Mooncake path
    "conversation_trace.jsonl": TESTDATA / "mooncake_conversation_trace.jsonl",
    "FAST25-release/traces/conversation_trace.jsonl": TESTDATA / "mooncake_conversation_trace.jsonl",
    # the import table's kv-cache-tester folder `traces/trace_NNNN.json`
    "traces": TESTDATA / "weka_cc_traces",
    # `$CLAUDE_CONFIG_DIR/projects` (the manual's `~/.claude/projects`): one project of captured transcripts
    "claude/projects/-work-demo": TESTDATA / "claude-code-otlp" / "json-full" / "transcripts",
    # `ttl --prices my-prices.toml`: the override the ttl section shows, as TOML
    "my-prices.toml": 'as_of = "2025-11-24"\nread_multiplier = 0.1\n'
    '[write_multipliers]\n"300" = 1.25\n"3600" = 2.0\n'
    "[default]\ninput = 3\noutput = 15\n[models.claude-opus-4-5]\ninput = 5\noutput = 25\n",
    # `simulate --serving mybox.json`: a box file as the serving section describes (a preset, one change)
    "mybox.json": json.dumps({"preset": "rtx-pro-6000x4", "max_num_seqs": 128}),
}

#: The lake every example reads: the manual's imports of the test data (paths as in ``PATHS``), plus
#: an hour of the agentic-coding preset starting an hour ago (but not before today, UTC), so that relative
#: windows (`--since 7d`) select rows and `check`'s default window (yesterday) never holds it.
LAKE_COMMANDS = [
    "traceflow import claude-code",
    "traceflow import mooncake FAST25-release/traces/conversation_trace.jsonl",
    "traceflow import kvcache-tester traces",
    "traceflow synth --preset agentic-coding --duration 1h --start {start}",
]

#: Examples not run here, each with the reason.
NOT_RUN = {
    "python3 -m pip install -e . && traceflow demo": "installs the package; `traceflow demo` (a collector on "
    "loopback ports and a report) is run by tests/test_demo.py",
    "python3 -m pip install -q -e '.[test]' && python3 -m pytest": "the test suite itself; "
    "tests/test_docs.py checks that CI runs exactly this line",
    "traceflow synth --preset agentic-coding --duration 30m --send http://127.0.0.1:4318 --speedup 20": (
        "needs a collector listening on 127.0.0.1:4318 and sends for 90 s; "
        "the load generator is run by tests/test_workload.py"
    ),
    "traceflow check --webhook https://hooks.example.com/traceflow": "would POST an alert to a host "
    "on the internet; tests/test_misses.py runs --webhook against a server on 127.0.0.1",
    "traceflow check --where attr:team.id=payments --webhook https://hooks.example.com/traceflow "
    "--webhook-format slack": "would POST an alert to a host on the internet; tests/test_webhooks.py "
    "runs --webhook-format slack and alertmanager against a server on 127.0.0.1",
    "python benchmarks/bench_serving.py --figures benchmarks/serving_figures.json": "a benchmark (three "
    "serving presets over two hours, three seeds); tests/test_serving.py checks the table it writes",
    "traceflow blocks --live --interval 10": "refreshes until Ctrl-C; tests/test_blocks.py runs --live "
    "with --count",
    "curl -sLO https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json": (
        "downloads; tests/data/litellm/model_prices_sample.json stands for the file"
    ),
    "traceflow prices update model_prices_and_context_window.json": "writes the user's price table, which "
    "every later example would read; tests/test_prices_update.py runs it on the sample",
}

#: docs/deploying.md: container, cluster and shell commands (no container engine or cluster here); the
#: Dockerfile, manifests and compose file they use are checked by tests/test_deploy.py.
NOT_RUN |= dict.fromkeys(
    [
        "docker build -t traceflow:0.1.0 .",
        "token=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')",
        """printf 'payments sha256:%s\\n' "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >> tokens""",
        "kubectl create secret generic traceflow-tokens --from-file=tokens=./tokens --dry-run=client -o yaml "
        "| kubectl apply -f -",
        "kubectl create namespace traceflow",
        "kubectl -n traceflow apply -f deploy/kubernetes/",
        "TRACEFLOW_TOKENS_FILE=$PWD/tokens docker compose -f deploy/compose.yaml up --build "
        "--scale collector=3",
    ],
    "a container or cluster command (docs/deploying.md); tests/test_deploy.py checks the files it uses",
)

#: An example with `[optional parts]` stands for these commands (the worked example's three hierarchies).
EXPANDED = {
    "traceflow simulate --workload agentic-coding --duration 2h --seed 0 --kv-model MiniMax-M2 "
    "--tier gpu=80GB [--tier dram=512GB [--tier ssd=100TB]] --per-minute": [
        "traceflow simulate --workload agentic-coding --duration 2h --seed 0 --kv-model MiniMax-M2 "
        "--tier gpu=80GB --per-minute",
        "traceflow simulate --workload agentic-coding --duration 2h --seed 0 --kv-model MiniMax-M2 "
        "--tier gpu=80GB --tier dram=512GB --per-minute",
        "traceflow simulate --workload agentic-coding --duration 2h --seed 0 --kv-model MiniMax-M2 "
        "--tier gpu=80GB --tier dram=512GB --tier ssd=100TB --per-minute",
    ],
}

#: Examples whose documented exit status is not 0.
EXIT_STATUS: dict[str, int] = {}

#: The README's everyday commands that another branch adds (issue 32's ccusage-style views): each runs
#: like any example once ``traceflow`` has the command; until then it is left out, with this reason.
#: ``test_pending_commands_are_not_yet_registered`` fails once one exists (then delete its entry).
PENDING: dict[str, str] = {}


def readme_examples(text: str = MANUAL) -> list[str]:
    """The command lines of the fenced blocks of ``text``, in order (see the module docstring)."""
    found: list[str] = []
    for lang, body in re.findall(r"^ *```(\w*)\n(.*?)^ *```", text, flags=re.S | re.M):
        if lang not in ("bash", ""):
            continue
        joined = re.sub(r"\\\n\s*", "", body)
        for raw in joined.splitlines():
            line = raw.strip()
            line = "" if line.startswith("#") else re.split(r"\s#\s", line, maxsplit=1)[0].rstrip()
            if line and (lang == "bash" or line.startswith(("traceflow ", "python"))):
                found.append(line)
    return found


#: Commands the set-up section names in its prose ("Then, on your own data: ..."), run as well.
PROSE = ["traceflow import claude-code", "traceflow mix --by model", "traceflow report --html report.html"]


@functools.cache
def _registered() -> set[str]:
    import typer.main

    from traceflow.cli.app import app, register_all

    register_all()
    return set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _pending(command: str) -> bool:
    name = command.split()[1]
    return name in PENDING and name not in _registered()


EXAMPLES = readme_examples()
RUN = [cmd for example in EXAMPLES if example not in NOT_RUN for cmd in EXPANDED.get(example, [example])]
RUN += [cmd for cmd in PROSE if cmd not in RUN]
RUN = [cmd for cmd in dict.fromkeys(RUN) if not _pending(cmd)]  # once each, in order


def test_every_example_is_run_or_listed_with_a_reason() -> None:
    assert len(EXAMPLES) > 30
    assert [e for e in NOT_RUN if e not in EXAMPLES] == []  # no stale entries
    assert [e for e in EXPANDED if e not in EXAMPLES] == []
    setup = README.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    assert [cmd for cmd in PROSE if f"`{cmd}`" not in setup] == []
    assert all(cmd.startswith("traceflow ") for cmd in RUN), [
        c for c in RUN if not c.startswith("traceflow ")
    ]
    left_out = [e for e in EXAMPLES if e not in NOT_RUN and e not in EXPANDED and e not in RUN]
    assert all(_pending(e) for e in left_out), left_out


def test_examples_are_read_from_every_page() -> None:
    """Each area page with commands contributes its examples (the manual is no longer one file)."""
    for page in ("README.md", "docs/forensics.md", "docs/sizing.md", "docs/replay.md", "docs/lake.md"):
        assert readme_examples(DOCUMENTS[page]), page


def test_pending_commands_are_not_yet_registered() -> None:
    assert sorted(set(PENDING) & _registered()) == []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working directory of the examples, with ``PATHS`` in it and the lake in ``TRACEFLOW_DATA``."""
    from datetime import UTC, datetime, timedelta

    root = tmp_path_factory.mktemp("manual")
    for name, what in PATHS.items():
        dest = root / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, Path) and what.is_dir():
            # a copy: `import claude-code` does not enter a linked folder (it imported nothing here)
            shutil.copytree(what, dest)
        elif isinstance(what, Path):
            dest.symlink_to(what)
        else:
            dest.write_text(what)
    env = {"TRACEFLOW_DATA": str(root / "lake"), "CLAUDE_CONFIG_DIR": str(root / "claude")}
    saved = {k: os.environ.get(k) for k in env}
    old_cwd = Path.cwd()
    os.environ.update(env)
    os.chdir(root)
    try:
        now = datetime.now(UTC)
        start = max(now - timedelta(hours=1), now.replace(hour=0, minute=0, second=0, microsecond=0))
        for command in LAKE_COMMANDS:
            code, out = traceflow(command.format(start=start.strftime("%Y-%m-%dT%H:%M:%SZ")))
            assert code == 0, (command, out)
        yield root
    finally:
        os.chdir(old_cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def traceflow(command: str) -> tuple[int, str]:
    """Run one ``traceflow ...`` line in-process: (exit status, stdout + stderr)."""
    from traceflow.cli.app import app, register_all
    from traceflow.errors import TraceflowError, UsageError

    register_all()
    argv = shlex.split(command)
    assert argv[0] == "traceflow"
    result = CliRunner().invoke(app, argv[1:])
    if result.exception and not isinstance(result.exception, SystemExit):
        if isinstance(result.exception, TraceflowError):
            return (2 if isinstance(result.exception, UsageError) else 1), str(result.exception)
        raise result.exception
    return result.exit_code, result.output


def check_status() -> int:
    """What the manual says `traceflow check` exits with on the example lake: 4 (the silence alert)
    when its default window, yesterday (UTC), holds no request while the 7 days before it hold some,
    else 0. Which it is depends on the day the suite runs (the Claude Code capture is dated), so it is
    counted from the lake's rows here rather than written down."""
    from datetime import UTC, datetime, timedelta

    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    window, baseline = today - timedelta(days=1), today - timedelta(days=8)
    w, b, t = (d.isoformat() for d in (window, baseline, today))
    query = (
        f"SELECT count(*) FILTER (WHERE t >= TIMESTAMPTZ '{w}') AS w, "
        f"count(*) FILTER (WHERE t < TIMESTAMPTZ '{w}') AS b "
        "FROM (SELECT coalesce(started_at, ended_at) AS t FROM requests WHERE total_tokens > 0) "
        f"WHERE t >= TIMESTAMPTZ '{b}' AND t < TIMESTAMPTZ '{t}'"
    )
    code, out = traceflow(f'traceflow sql "{query}" --format json')
    assert code == 0, out
    counts = json.loads(out)[0]
    return 4 if counts["w"] == 0 and counts["b"] > 0 else 0


@pytest.mark.parametrize("command", RUN)
def test_readme_example_runs_as_written(workdir: Path, command: str) -> None:
    want = check_status() if command == "traceflow check" else EXIT_STATUS.get(command, 0)
    code, out = traceflow(command)
    assert code == want, out


# --- the numbers the manual quotes after an example -----------------------------------------------


def run_json(command: str) -> Any:
    code, out = traceflow(command + " --format json")
    assert code == 0, out
    return json.loads(out)


def quoted(pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern`` in the manual (which must still say it)."""
    match = re.search(pattern, MANUAL, flags=re.S)
    assert match, f"the manual no longer says {pattern!r}"
    return match.groups()


SIZE = next(e for e in EXAMPLES if e.startswith("traceflow size") and "--ssd-write-rate" not in e)
SIZE_SEED = next(e for e in EXAMPLES if e.startswith("traceflow size") and "--ssd-write-rate" in e)


def test_models_count(workdir: Path) -> None:
    (count,) = quoted(r"traceflow models\s+# (\d+) models")
    assert len(run_json("traceflow models")) == int(count)


def test_size_seed_check(workdir: Path) -> None:
    """The `size` section's seed check: "MiniMax-M2 FP8 = 126,976 B/token; 4,200 tok/s × 1 h = ..."."""
    b, rate, tokens, tb, held, write, dwpd, seed_write, seed_dwpd = quoted(
        r"Seed check: MiniMax-M2 FP8 = ([\d,]+) B/token; ([\d,]+) tok/s × 1 h = ([\d.]+) M tokens"
        r" = ([\d.]+) TB; 80 GB holds\s+(\d+) s; the command's ([\d.]+) GB/s over 8 × 12.8 TB RAID10"
        r" = ([\d.]+) DWPD,\s+"
        r"and the second's ([\d.]+) GB/s.*?= ([\d.]+) DWPD"
    )
    d = run_json(SIZE)
    assert f"{d['kv_bytes_per_token']:,}" == b and f"{d['rate_tok_s']:,.0f}" == rate
    one_hour = next(f for f in d["footprints"] if f["ttl_s"] == 3600)
    assert f"{one_hour['tokens'] / 1e6:.2f}" == tokens
    assert f"{one_hour['footprint_bytes'] / 1e12:.2f}" == tb
    assert f"{d['tiers'][0]['hold_s']:.0f}" == held
    assert f"{d['ssd_write_bytes_per_s'] / 1e9:.2f}" == write and f"{d['dwpd']:.2f}" == dwpd
    s = run_json(SIZE_SEED)
    assert f"{s['ssd_write_bytes_per_s'] / 1e9:.1f}" == seed_write and f"{s['dwpd']:.2f}" == seed_dwpd


@pytest.fixture(scope="module")
def hierarchies(workdir: Path) -> list[Any]:
    """The worked example's three runs: GPU only, GPU + DRAM, GPU + DRAM + SSD."""
    return [run_json(cmd) for cmd in next(iter(EXPANDED.values()))]


def test_worked_example_sizes(hierarchies: list[Any]) -> None:
    requests, blocks = quoted(r"\n([\d,]+) requests, ([\d.]+) M block accesses, MiniMax-M2 FP8")
    for run in hierarchies:
        assert f"{run['requests']:,}" == requests and f"{run['blocks'] / 1e6:.2f}" == blocks


def test_worked_example_block_bytes_and_flash_writes(hierarchies: list[Any]) -> None:
    kib, mib = quoted(r"MiniMax-M2 FP8 \((\d+) KiB per token, (\d+) MiB per 512-token block\)")
    run = hierarchies[2]
    assert (
        f"{run['model_kv_bytes_per_token'] / 1024:.0f}" == kib and f"{run['block_bytes'] / 2**20:.0f}" == mib
    )
    (flash_tb,) = quoted(r"\((\d+) TB written to flash in 2 h")
    assert f"{run['tiers'][2]['written_bytes'] / 1e12:.0f}" == flash_tb


def test_serving_preset_kv_capacity(workdir: Path) -> None:
    """The serving section's VRAM figure, from its first example's box (`rtx-pro-6000x4+dram`)."""
    gb, tokens = quoted(r"4 × \(96 GiB × 0\.9 −\s+57\.25 GB − 4 GiB\) = ([\d.]+) GB, ([\d,]+) tokens")
    command = next(e for e in EXAMPLES if "--serving rtx-pro-6000x4+dram" in e)
    box = run_json(command)["serving"]
    assert f"{box['kv_bytes'] / 1e9:.1f}" == gb and f"{box['kv_tokens']:,}" == tokens


def _k(tok_s: float) -> str:
    return f"{tok_s / 1000:.0f}k"


def test_worked_example_per_minute_table(hierarchies: list[Any]) -> None:
    rows = re.findall(
        r"^\| (\d+) \| ([\d.]+ / \d+k) \| ([\d.]+ / \d+k) \| ([\d.]+ / \d+k) \| (\d+) GB \|$", MANUAL, re.M
    )
    assert len(rows) == 8
    for minute, *cells, dram_gb in rows:
        got = []
        for run in hierarchies:
            m = run["per_minute"][int(minute)]
            assert m["minute"] == int(minute)
            got.append(f"{m['token_hit_ratio']:.2f} / {_k(m['prefill_throughput_tok_s'])}")
        assert got == cells, minute
        dram = hierarchies[2]["per_minute"][int(minute)]["dram_resident_bytes"]
        assert f"{dram / 1e9:.0f}" == dram_gb, minute


def test_worked_example_hierarchy_table(hierarchies: list[Any]) -> None:
    rows = re.findall(
        r"^\| (GPU[^|]*?) \| ([\d.]+) \| ([\d.]+) s / ([\d.]+) s \| ([\d.]+) s[^|]*\|$", MANUAL, re.M
    )
    assert [r[0] for r in rows] == ["GPU only", "GPU + DRAM", "GPU + DRAM + SSD"]
    for (_, ratio, p50, p99, worst), run in zip(rows, hierarchies, strict=True):
        assert f"{run['token_hit_ratio']:.2f}" == ratio
        assert (f"{run['ttft_p50_s']:.2f}", f"{run['ttft_p99_s']:.2f}") == (p50, p99)
        assert f"{run['worst_resumed']['ttft_s']:.2f}" == worst
    (recomputed,) = quoted(r"\| GPU only \|[^\n]*\((\d+)k tokens recomputed\)")
    assert f"{hierarchies[0]['worst_resumed']['recomputed_tokens'] / 1000:.0f}" == recomputed
