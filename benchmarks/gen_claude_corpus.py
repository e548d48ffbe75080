#!/usr/bin/env python3
"""Seeded generator of a realistic Claude Code transcript corpus, with its own ground truth.

Writes the layout Claude Code uses under ``$CLAUDE_CONFIG_DIR``::

    OUT/projects/<project-dir>/<session-uuid>.jsonl
    OUT/projects/<project-dir>/<session-uuid>/subagents/agent-<agentId>.jsonl   (+ .meta.json)
    OUT/expected.json

What the transcripts look like (see docs/schemas.md#claude-code and
the captures in tests/data/claude-code-otlp):

* ~50 projects (Zipf-weighted), thousands of sessions spread over 30 UTC days, versions 2.1.76..2.1.112
  (releases are fictional but placed so that about half the sessions run a version < 2.1.97);
* ``user`` prompts, ``user`` tool_result lines (Read / Bash / Edit / Grep / ... with log-normally sized
  content, duplicated into ``toolUseResult`` the way the real client does), ``system`` turn_duration and
  compact_boundary lines, ``summary``, ``file-history-snapshot`` and ``queue-operation`` lines;
* ``assistant`` lines written ONE PER CONTENT BLOCK (thinking / text / tool_use), sharing ``message.id`` and
  ``requestId`` and repeating ``usage``. Sessions on versions < 2.1.97 carry the streaming placeholder
  ``output_tokens`` (1..30, never above the final count) and ``stop_reason: null`` on every copy but the
  last; sessions on >= 2.1.97 carry the final usage on every copy;
* usage that behaves like a real agent: cache_read grows with the context, cold input is tiny, cache
  writes are the new suffix, and an idle gap longer than the session's cache TTL (5m or 1h) makes the next
  request re-write the whole prefix; contexts above ~155k tokens are compacted (compact_boundary);
  ``cache_creation`` always carries the 5m/1h breakdown, and on ~1% of requests (a real < 2.1.152 quirk)
  ``cache_creation_input_tokens`` is 0 while the breakdown is not: the breakdown is the truth;
* ``Task`` tool calls spawn sub-agents whose transcripts live under ``<session>/subagents/`` with
  ``isSidechain: true``, their own ``agentId`` and the parent's ``sessionId``;
* rare ``<synthetic>`` API-error assistant lines (``isApiErrorMessage: true``, zero usage, no requestId,
  as the real client writes them), each followed by the retried real request.

Every key ccusage (20.0.24, Rust) refuses as JSON null -- ``id cwd model speed costUSD version sessionId
requestId isApiErrorMessage cache_read_input_tokens cache_creation_input_tokens`` -- is either non-null or
absent on every line that carries ``"usage":{`` (``costUSD`` is always absent, as in every client >= 1.0.9).

Ground truth: ``expected.json`` holds, per UTC day, the four token totals of the API requests the
generator simulated (one count per request, final output count, cache write = 5m + 1h breakdown). A
request, the line that triggered it and all its block lines are kept on one UTC day (no trigger line is
written in the last 10 minutes of a day), so bucketing by any copy's timestamp or by the estimated request
start gives the same days.

Deterministic for a seed: the same ``(seed, size_mb)`` gives byte-identical files.

Usage::

    python benchmarks/gen_claude_corpus.py --out /tmp/tfbench/corpus --size-mb 420 --seed 7
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

# --------------------------------------------------------------------------------------------------
# Constants of the simulated world
# --------------------------------------------------------------------------------------------------

DAY_MS = 86_400_000
WINDOW_START = dt.datetime(2026, 3, 25, tzinfo=dt.UTC)
WINDOW_START_MS = int(WINDOW_START.timestamp() * 1000)
WINDOW_DAYS = 30

#: (version, release day relative to WINDOW_START). Fictional dates; 2.1.97 is the real landmark
#: (2026-04-08) after which per-block lines carry the final usage.
VERSIONS: list[tuple[str, int]] = [
    ("2.1.76", -14),
    ("2.1.79", -9),
    ("2.1.81", -4),
    ("2.1.83", -1),
    ("2.1.85", 1),
    ("2.1.87", 4),
    ("2.1.89", 7),
    ("2.1.91", 9),
    ("2.1.94", 11),
    ("2.1.96", 13),
    ("2.1.97", 14),
    ("2.1.98", 15),
    ("2.1.101", 17),
    ("2.1.104", 20),
    ("2.1.107", 23),
    ("2.1.110", 26),
    ("2.1.112", 28),
]
FINAL_USAGE_FROM = (2, 1, 97)

MAIN_MODELS = [
    ("claude-sonnet-4-5-20250929", 0.55),
    ("claude-opus-4-5-20251101", 0.40),
    ("claude-haiku-4-5-20251001", 0.05),
]
HAIKU = "claude-haiku-4-5-20251001"
N_PROJECTS = 50
COMPACT_AT = 155_000  # prompt tokens that trigger an auto-compact
#: No line that triggers a request (prompt, tool result, sub-agent prompt, compact summary) is written in
#: the last 10 minutes of a UTC day: the clock jumps past midnight instead. So a request, its trigger and
#: all its block lines share one UTC day, and a per-day report agrees whether it buckets requests by the
#: response lines' timestamps (ccusage) or by the estimated request start (the trigger line's timestamp).
MIDNIGHT_GUARD_MS = 10 * 60_000
TOOL_NAMES = ["Read", "Bash", "Edit", "Grep", "Glob", "Write", "TodoWrite", "WebFetch"]
TOOL_WEIGHTS = [0.34, 0.27, 0.16, 0.08, 0.05, 0.04, 0.04, 0.02]
SUB_TOOL_NAMES = ["Read", "Grep", "Glob", "Bash", "WebFetch"]
SUB_TOOL_WEIGHTS = [0.45, 0.25, 0.12, 0.15, 0.03]

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_HEX = "0123456789abcdef"

_WORDS = (  # noqa: SIM905
    "the a to of and in that is for it with as on this be we can not if should will check file test "
    "function value error return call config module import build cache token request session model "
    "output input parse line path data table index query result update change fix bug run pass fail "
    "type list dict string number field key option default handle case need look next first then "
    "also because now already make sure see where when which user agent read write edit add remove"
).split()
_IDENTS = (  # noqa: SIM905
    "parse_line load_config read_file write_rows handle_request build_index flush_batch resolve_path "
    "compute_total merge_frames open_session close_session validate_schema emit_event to_json "
    "from_bytes retry_after backoff cache_key hash_prefix tokenize decode encode normalize "
    "apply_patch run_query plan_steps select_model split_chunks join_parts sort_keys dedupe_rows "
    "update_state commit_offset rotate_logs spawn_worker drain_queue"
).split()
_MODULES = [
    "os",
    "sys",
    "json",
    "re",
    "time",
    "pathlib",
    "typing",
    "itertools",
    "functools",
    "asyncio",
    "logging",
]


_DAY_STR: dict[int, str] = {}


def ts_str(ms: int) -> str:
    """ISO-8601 UTC with milliseconds and ``Z``, like Claude Code writes it."""
    d, r = divmod(ms, DAY_MS)
    ds = _DAY_STR.get(d)
    if ds is None:
        ds = (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=d)).strftime("%Y-%m-%d")
        _DAY_STR[d] = ds
    h, r = divmod(r, 3_600_000)
    m, r = divmod(r, 60_000)
    s, r = divmod(r, 1000)
    return f"{ds}T{h:02d}:{m:02d}:{s:02d}.{r:03d}Z"


def day_of(ms: int) -> str:
    ts_str(ms)
    return _DAY_STR[ms // DAY_MS]


def vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def project_dir_name(cwd: str) -> str:
    """Claude Code's project folder name: every non-alphanumeric character of the cwd becomes ``-``."""
    return re.sub(r"[^a-zA-Z0-9]", "-", cwd)


# --------------------------------------------------------------------------------------------------
# Random helpers (all draws go through a seeded random.Random)
# --------------------------------------------------------------------------------------------------


def rand_uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"


def rand_b62(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(_B62, k=n))


def rand_hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(_HEX, k=n))


def lognorm_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, int(median * math.exp(rng.gauss(0.0, sigma)))))


class TextPool:
    """Deterministic code-ish and prose-ish text to slice tool results and thinking from."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed ^ 0x5EED)
        lines: list[str] = []
        for i in range(60_000):
            k = rng.random()
            ident = rng.choice(_IDENTS)
            if k < 0.08:
                lines.append(f"import {rng.choice(_MODULES)}")
            elif k < 0.2:
                lines.append(f"def {ident}_{i % 97}(self, {rng.choice(_WORDS)}_{rng.randint(0, 9)}):")
            elif k < 0.35:
                lines.append(f"    # {' '.join(rng.choices(_WORDS, k=rng.randint(3, 12)))}")
            elif k < 0.55:
                lines.append(
                    f"        return {ident}({rng.choice(_WORDS)}, {rng.randint(0, 4096)}, "
                    f"key='{rng.choice(_WORDS)}')"
                )
            elif k < 0.75:
                lines.append(
                    f"    {rng.choice(_WORDS)}_{rng.randint(0, 99)} = self.{ident}"
                    f"[{rng.randint(0, 64)}] + {rng.random():.4f}"
                )
            elif k < 0.85:
                lines.append(f'        raise ValueError("{" ".join(rng.choices(_WORDS, k=5))}")')
            else:
                lines.append("")
        self.code = "\n".join(f"{(i % 900) + 1:>6}\u2192{ln}" for i, ln in enumerate(lines))
        self.plain = "\n".join(lines)
        words = rng.choices(_WORDS, k=220_000)
        self.prose = " ".join(words)

    def slice(self, rng: random.Random, which: str, n: int) -> str:
        src: str = getattr(self, which)
        n = min(n, len(src) - 1)
        start = rng.randrange(0, len(src) - n)
        return src[start : start + n]


# --------------------------------------------------------------------------------------------------
# Ground truth accounting
# --------------------------------------------------------------------------------------------------


#: What the ground truth counts per day (and over all days), in the order it is written.
DAY_KEYS = (
    "requests",
    "cold_input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
)


def day_totals(counts: Counter[str]) -> dict[str, int]:
    """``counts`` as written: :data:`DAY_KEYS` (0 where none was counted), then ``total_tokens``."""
    d = {k: counts[k] for k in DAY_KEYS}
    d["total_tokens"] = (
        d["cold_input_tokens"] + d["cache_read_tokens"] + d["cache_write_tokens"] + d["output_tokens"]
    )
    return d


#: What the corpus summary counts (besides its projects), in the order it is written.
CORPUS_KEYS = (
    "sessions",
    "files",
    "subagent_files",
    "lines",
    "assistant_lines",
    "bytes",
    "requests",
    "requests_pre_2_1_97",
    "requests_trigger_on_other_day",
    "requests_sidechain",
    "synthetic_error_lines",
    "compactions",
    "requests_with_zero_cache_creation_total",
)


# --------------------------------------------------------------------------------------------------
# One conversation (a main session or a sub-agent)
# --------------------------------------------------------------------------------------------------


@dataclass
class Conv:
    rng: random.Random
    session_id: str
    cwd: str
    version: str
    branch: str
    slug: str
    model: str
    tier: str  # "5m" | "1h" | "mixed"
    sys_tokens: int
    clock: int  # ms since epoch
    sidechain: bool = False
    agent_id: str | None = None
    final_usage: bool = True
    lines: list[bytes] = field(default_factory=list)
    parent_uuid: str | None = None
    ctx: int = 0  # tokens of the conversation so far (prompt of the last request)
    pending: int = 0  # tokens appended since the last request
    cached: int = 0  # prefix tokens that the last request left in the cache
    last_req_ms: int | None = None
    prompt_id: str | None = None
    requests: int = 0
    last_usage: dict[str, Any] = field(default_factory=dict)
    trigger_ms: int = 0  # write time of the line that triggered the next request

    @property
    def ttl_ms(self) -> int:
        return 300_000 if self.tier == "5m" else 3_600_000

    def base(self, kind: str) -> dict[str, Any]:
        d: dict[str, Any] = {
            "parentUuid": self.parent_uuid,
            "isSidechain": self.sidechain,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": self.branch,
        }
        if self.agent_id is not None:
            d["agentId"] = self.agent_id
        d["slug"] = self.slug
        d["type"] = kind
        return d


class CorpusGenerator:
    """Builds the corpus session by session until ``target_bytes`` of JSONL have been written."""

    def __init__(self, out: Path, target_bytes: int, seed: int) -> None:
        self.out = out
        self.target = target_bytes
        self.seed = seed
        self.pool = TextPool(seed)
        self.days: dict[str, Counter[str]] = {}
        self.stats: Counter[str] = Counter()
        self.project_dirs: set[str] = set()  # the projects that got a session
        world = random.Random(seed)
        self.projects = self._make_projects(world)
        # Zipf-like project weights
        self.project_weights = [1.0 / (i + 1) ** 0.9 for i in range(len(self.projects))]

    # ---------------------------------------------------------------- world
    def _make_projects(self, rng: random.Random) -> list[dict[str, Any]]:
        users = ["dev", "alice", "bob", "mkim", "jlopez", "svc-ci"]
        stems = [
            "api",
            "gateway",
            "web-app",
            "billing",
            "infra",
            "data-pipeline",
            "ml-train",
            "mobile",
            "docs",
            "cli",
            "sdk-python",
            "sdk-ts",
            "search",
            "auth",
            "notifications",
            "payments",
            "etl",
            "dashboards",
            "scheduler",
            "kv-store",
            "proxy",
            "vector-db",
            "recsys",
            "monorepo",
        ]
        projects: list[dict[str, Any]] = []
        seen: set[str] = set()
        while len(projects) < N_PROJECTS:
            user = rng.choice(users)
            stem = rng.choice(stems)
            root = rng.choice([f"/home/{user}/src", f"/Users/{user}/code", f"/home/{user}/work"])
            name = (
                stem if rng.random() < 0.5 else f"{stem}-{rng.choice(['v2', 'svc', 'core', 'ui', 'tools'])}"
            )
            cwd = f"{root}/{name}"
            if rng.random() < 0.15:
                cwd += f"/{rng.choice(['backend', 'frontend', 'packages/core', 'services/api'])}"
            if cwd in seen:
                continue
            seen.add(cwd)
            projects.append(
                {
                    "cwd": cwd,
                    "dir": project_dir_name(cwd),
                    "tier": "1h" if rng.random() < 0.4 else "5m",
                    "lag": rng.choice([0, 0, 0, 1, 1, 2, 4]),  # how many releases behind it tends to be
                    "sys": rng.randint(12_000, 26_000),
                    "opus_bias": rng.random(),
                }
            )
        return projects

    # ---------------------------------------------------------------- ground truth
    def _account(self, day: str, cold: int, read: int, w5: int, w1: int, out: int) -> None:
        counted = (1, cold, read, w5 + w1, w5, w1, out)
        self.days.setdefault(day, Counter()).update(dict(zip(DAY_KEYS, counted, strict=True)))

    # ---------------------------------------------------------------- lines
    def _trigger(self, conv: Conv) -> None:
        """Called before writing a line that triggers a request: keep clear of UTC midnight."""
        rest = DAY_MS - conv.clock % DAY_MS
        if rest < MIDNIGHT_GUARD_MS:
            conv.clock += rest + conv.rng.randint(100, 30_000)
        conv.trigger_ms = conv.clock

    def _emit(self, conv: Conv, obj: dict[str, Any]) -> None:
        conv.lines.append(orjson.dumps(obj))

    def _user_prompt(self, conv: Conv) -> None:
        rng = conv.rng
        self._trigger(conv)
        uid = rand_uuid(rng)
        conv.prompt_id = rand_uuid(rng)
        if not conv.sidechain:
            # file-history-snapshot precedes each prompt in the main transcript
            self._emit(
                conv,
                {
                    "type": "file-history-snapshot",
                    "messageId": uid,
                    "snapshot": {
                        "messageId": uid,
                        "trackedFileBackups": {
                            f"src/{rng.choice(_IDENTS)}.py": {
                                "backupFileName": f"{rand_hex(rng, 16)}@v{rng.randint(1, 6)}",
                                "version": rng.randint(1, 6),
                                "backupTime": ts_str(conv.clock - rng.randint(1000, 600_000)),
                            }
                            for _ in range(rng.randint(0, 3))
                        },
                        "timestamp": ts_str(conv.clock),
                    },
                    "isSnapshotUpdate": False,
                },
            )
        n_words = lognorm_int(rng, 25, 1.0, 2, 600)
        text = " ".join(rng.choices(_WORDS, k=n_words))
        d = conv.base("user")
        d["message"] = {"role": "user", "content": text}
        d["uuid"] = uid
        d["timestamp"] = ts_str(conv.clock)
        if not conv.sidechain:
            d["permissionMode"] = "default" if rng.random() < 0.7 else "acceptEdits"
        d["promptId"] = conv.prompt_id
        self._emit(conv, d)
        conv.parent_uuid = uid
        conv.pending += int(n_words * 1.4) + 8

    def _blocks_for_request(
        self, conv: Conv, final: bool, n_tools: int, tool_names: list[str]
    ) -> list[tuple[str, int, Any]]:
        """(kind, output_tokens, payload) per content block."""
        rng = conv.rng
        blocks: list[tuple[str, int, Any]] = []
        thinks = conv.model != HAIKU and rng.random() < (0.55 if not conv.sidechain else 0.25)
        if thinks:
            blocks.append(("thinking", lognorm_int(rng, 180, 1.0, 12, 6000), None))
        if final or rng.random() < 0.45:
            blocks.append(("text", lognorm_int(rng, 90 if not final else 220, 0.9, 4, 2500), None))
        for name in tool_names[:n_tools]:
            tok = lognorm_int(rng, 900 if name in ("Write", "Edit") else 70, 0.8, 20, 8000)
            blocks.append(("tool_use", tok, name))
        if not blocks:
            blocks.append(("text", lognorm_int(rng, 60, 0.8, 3, 800), None))
        return blocks

    def _tool_input(self, rng: random.Random, name: str, cwd: str, out_tokens: int) -> dict[str, Any]:
        f = f"{cwd}/src/{rng.choice(_IDENTS)}.py"
        if name == "Read":
            return {"file_path": f}
        if name == "Bash":
            cmd = rng.choice(
                [
                    "pytest -x -q",
                    "git status",
                    "git diff --stat",
                    "ls -la",
                    "make build",
                    "ruff check .",
                    "npm test",
                    "cargo test",
                    "grep -rn TODO src",
                    "python -m mypy .",
                ]
            )
            return {"command": cmd, "description": " ".join(rng.choices(_WORDS, k=4))}
        if name == "Edit":
            n = min(out_tokens * 2, 20_000)
            return {
                "file_path": f,
                "old_string": self.pool.slice(rng, "plain", n // 2),
                "new_string": self.pool.slice(rng, "plain", n // 2),
            }
        if name == "Write":
            return {"file_path": f, "content": self.pool.slice(rng, "plain", min(out_tokens * 3, 30_000))}
        if name == "Grep":
            return {"pattern": rng.choice(_IDENTS), "path": cwd, "output_mode": "files_with_matches"}
        if name == "Glob":
            return {"pattern": f"**/*{rng.choice(['.py', '.ts', '.md', '.toml'])}"}
        if name == "TodoWrite":
            return {
                "todos": [
                    {
                        "content": " ".join(rng.choices(_WORDS, k=6)),
                        "status": rng.choice(["pending", "in_progress", "completed"]),
                        "activeForm": " ".join(rng.choices(_WORDS, k=4)),
                    }
                    for _ in range(rng.randint(2, 7))
                ]
            }
        if name == "WebFetch":
            return {
                "url": f"https://docs.example.com/{rng.choice(_IDENTS)}",
                "prompt": " ".join(rng.choices(_WORDS, k=8)),
            }
        if name == "Task":
            return {
                "description": " ".join(rng.choices(_WORDS, k=4)),
                "prompt": " ".join(rng.choices(_WORDS, k=lognorm_int(rng, 80, 0.7, 10, 800))),
                "subagent_type": rng.choice(["Explore", "general-purpose", "Plan"]),
            }
        return {}

    def _block_content(self, conv: Conv, kind: str, tok: int, payload: Any) -> dict[str, Any]:
        rng = conv.rng
        if kind == "thinking":
            return {
                "type": "thinking",
                "thinking": self.pool.slice(rng, "prose", min(tok * 4, 24_000)),
                "signature": rand_b62(rng, 120) + "==",
            }
        if kind == "text":
            return {"type": "text", "text": self.pool.slice(rng, "prose", min(tok * 4, 10_000))}
        return {
            "type": "tool_use",
            "id": "toolu_01" + rand_b62(rng, 22),
            "name": payload,
            "input": self._tool_input(rng, payload, conv.cwd, tok),
        }

    def _usage_for_request(self, conv: Conv) -> tuple[int, int, int, int, bool]:
        """cold, read, write_5m, write_1h, quirk for the next request; updates the cache state."""
        rng = conv.rng
        prompt = conv.ctx + conv.pending
        warm = conv.last_req_ms is not None and conv.clock - conv.last_req_ms <= conv.ttl_ms
        # on a cold conversation cache the shared system prompt + tools may still be cached
        read = conv.cached if warm else (conv.sys_tokens if rng.random() < 0.45 else 0)
        # cold input = the tokens after the last cache breakpoint: tiny, now and then a few hundred
        cold = rng.randint(1, 9) if rng.random() < 0.97 else rng.randint(10, 2500)
        cold = max(1, min(cold, prompt - read))
        write = max(0, prompt - cold - read)
        if conv.tier == "5m":
            w5, w1 = write, 0
        elif conv.tier == "1h":
            w5, w1 = 0, write
        else:
            w1 = write // 3
            w5 = write - w1
        conv.cached = read + write
        conv.ctx = prompt
        conv.pending = 0
        quirk = write > 0 and rng.random() < 0.01
        return cold, read, w5, w1, quirk

    def _synthetic_error(self, conv: Conv) -> None:
        rng = conv.rng
        status, etype, emsg = rng.choice(
            [
                (529, "overloaded_error", "Overloaded"),
                (500, "api_error", "Internal server error"),
                (429, "rate_limit_error", "Rate limited"),
            ]
        )
        body = orjson.dumps({"type": "error", "error": {"type": etype, "message": emsg}}).decode()
        d = conv.base("assistant")
        d["uuid"] = uid = rand_uuid(rng)
        d["timestamp"] = ts_str(conv.clock)
        d["message"] = {
            "id": rand_uuid(rng),
            "container": None,
            "model": "<synthetic>",
            "role": "assistant",
            "stop_reason": "stop_sequence",
            "stop_sequence": "",
            "type": "message",
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
                "service_tier": None,
                "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
            },
            "content": [{"type": "text", "text": f"API Error: {status} {body}"}],
            "context_management": None,
        }
        d["isApiErrorMessage"] = True
        self._emit(conv, d)
        conv.parent_uuid = uid
        self.stats["synthetic_error_lines"] += 1
        conv.clock += rng.randint(1500, 20_000)  # retry backoff

    def _request(self, conv: Conv, final: bool, n_tools: int, tool_names: list[str]) -> list[dict[str, Any]]:
        """One API call: per-block assistant lines. Returns the tool_use blocks."""
        rng = conv.rng
        if rng.random() < 0.004:
            self._synthetic_error(conv)
        blocks = self._blocks_for_request(conv, final, n_tools, tool_names)
        # timing: ttft then one line per finished block
        ttft = lognorm_int(rng, 1800, 0.5, 300, 30_000)
        tps = rng.uniform(45, 110) if conv.model != HAIKU else rng.uniform(120, 220)
        offsets = []
        t = ttft
        for _, tok, _ in blocks:
            t += int(tok / tps * 1000) + rng.randint(5, 60)
            offsets.append(t)
        first_day = (conv.clock + offsets[0]) // DAY_MS
        last_day = (conv.clock + offsets[-1]) // DAY_MS
        if first_day != last_day:  # keep one request's copies on one UTC day
            conv.clock = last_day * DAY_MS + rng.randint(50, 4000)
        cold, read, w5, w1, quirk = self._usage_for_request(conv)
        final_out = sum(tok for _, tok, _ in blocks)
        msg_id = "msg_01" + rand_b62(rng, 22)
        req_id = "req_011C" + rand_b62(rng, 20)
        stop = "tool_use" if any(k == "tool_use" for k, _, _ in blocks) else "end_turn"
        day = day_of(conv.clock + offsets[0])
        self._account(day, cold, read, w5, w1, final_out)
        st = self.stats
        if day_of(conv.trigger_ms) != day:
            st["requests_trigger_on_other_day"] += 1
        st["requests"] += 1
        if not conv.final_usage:
            st["requests_pre_2_1_97"] += 1
        if conv.sidechain:
            st["requests_sidechain"] += 1
        if quirk:
            st["requests_with_zero_cache_creation_total"] += 1
        n = len(blocks)
        placeholder = min(rng.randint(1, 30), final_out)
        tool_uses = []
        for i, ((kind, tok, payload), off) in enumerate(zip(blocks, offsets, strict=True)):
            last = i == n - 1
            out_tok = final_out if (conv.final_usage or last) else placeholder
            usage = {
                "input_tokens": cold,
                "cache_creation_input_tokens": 0 if quirk else w5 + w1,
                "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1},
                "output_tokens": out_tok,
                "service_tier": "standard",
                "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
                "speed": "standard",
            }
            if not conv.final_usage:
                usage["inference_geo"] = "not_available"
            content = self._block_content(conv, kind, tok, payload)
            if kind == "tool_use":
                tool_uses.append(content)
            d = conv.base("assistant")
            d["message"] = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": conv.model,
                "content": [content],
                "stop_reason": stop if (conv.final_usage or last) else None,
                "stop_sequence": None,
                "usage": usage,
            }
            d["requestId"] = req_id
            d["uuid"] = uid = rand_uuid(rng)
            d["timestamp"] = ts_str(conv.clock + off)
            self._emit(conv, d)
            conv.parent_uuid = uid
            st["assistant_lines"] += 1
        conv.last_usage = usage
        conv.clock += offsets[-1]
        conv.last_req_ms = conv.clock
        conv.requests += 1
        conv.pending += final_out  # the assistant turn joins the context
        return tool_uses

    def _tool_result(self, conv: Conv, tu: dict[str, Any], sub_result: dict[str, Any] | None = None) -> None:
        rng = conv.rng
        self._trigger(conv)
        name = tu["name"]
        is_error = False
        if sub_result is not None:
            text = sub_result["text"]
            content: Any = [{"type": "text", "text": text}]
            tur: dict[str, Any] = {
                "status": "completed",
                "prompt": tu["input"].get("prompt", ""),
                "agentId": sub_result["agent_id"],
                "content": [{"type": "text", "text": text}],
                "totalDurationMs": sub_result["duration_ms"],
                "totalTokens": sub_result["total_tokens"],
                "totalToolUseCount": sub_result["tool_uses"],
                "usage": sub_result["usage"],
            }
            size = len(text)
        else:
            if name == "Read":
                size = lognorm_int(rng, 2200, 1.1, 80, 120_000)
                text = self.pool.slice(rng, "code", size)
                content = text
                tur = {
                    "type": "text",
                    "file": {
                        "filePath": tu["input"]["file_path"],
                        "content": text,
                        "numLines": text.count("\n") + 1,
                        "startLine": 1,
                        "totalLines": text.count("\n") + 1,
                    },
                }
            elif name == "Bash":
                size = lognorm_int(rng, 500, 1.4, 0, 60_000)
                text = self.pool.slice(rng, "plain", size)
                is_error = rng.random() < 0.08
                content = text
                tur = {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}
            elif name == "Edit":
                orig = self.pool.slice(rng, "plain", lognorm_int(rng, 2500, 0.9, 200, 60_000))
                snippet = self.pool.slice(rng, "code", lognorm_int(rng, 700, 0.6, 100, 5000))
                text = (
                    f"The file {tu['input']['file_path']} has been updated. Here's the result of running "
                    f"`cat -n` on a snippet of the edited file:\n{snippet}"
                )
                content = text
                size = len(text)
                tur = {
                    "filePath": tu["input"]["file_path"],
                    "oldString": tu["input"]["old_string"],
                    "newString": tu["input"]["new_string"],
                    "originalFile": orig,
                    "structuredPatch": [
                        {
                            "oldStart": 10,
                            "oldLines": 3,
                            "newStart": 10,
                            "newLines": 4,
                            "lines": snippet.split("\n")[:8],
                        }
                    ],
                    "userModified": False,
                    "replaceAll": False,
                }
            elif name in ("Grep", "Glob"):
                files = [
                    f"{conv.cwd}/src/{rng.choice(_IDENTS)}_{i}.py"
                    for i in range(lognorm_int(rng, 8, 1.0, 0, 400))
                ]
                text = "\n".join(files) if files else "No files found"
                content = text
                size = len(text)
                if name == "Grep":
                    tur = {"mode": "files_with_matches", "filenames": files, "numFiles": len(files)}
                else:
                    tur = {
                        "filenames": files,
                        "durationMs": rng.randint(2, 300),
                        "numFiles": len(files),
                        "truncated": False,
                    }
            elif name == "Write":
                text = f"File created successfully at: {tu['input']['file_path']}"
                content = text
                size = len(text)
                tur = {
                    "type": "create",
                    "filePath": tu["input"]["file_path"],
                    "content": tu["input"]["content"],
                    "structuredPatch": [],
                }
            elif name == "TodoWrite":
                text = (
                    "Todos have been modified successfully. Ensure that you continue to use the todo list "
                    "to track your progress."
                )
                content = text
                size = len(text)
                tur = {"oldTodos": [], "newTodos": tu["input"]["todos"]}
            else:  # WebFetch
                size = lognorm_int(rng, 3000, 0.8, 200, 40_000)
                text = self.pool.slice(rng, "prose", size)
                content = text
                tur = {
                    "bytes": size * 3,
                    "code": 200,
                    "codeText": "OK",
                    "result": text,
                    "durationMs": rng.randint(300, 9000),
                    "url": tu["input"]["url"],
                }
        block: dict[str, Any] = {"tool_use_id": tu["id"], "type": "tool_result", "content": content}
        if is_error:
            block["is_error"] = True
        d = conv.base("user")
        d["message"] = {"role": "user", "content": [block]}
        d["uuid"] = uid = rand_uuid(rng)
        d["timestamp"] = ts_str(conv.clock)
        d["toolUseResult"] = tur
        d["sourceToolAssistantUUID"] = conv.parent_uuid
        d["promptId"] = conv.prompt_id
        self._emit(conv, d)
        conv.parent_uuid = uid
        conv.pending += int(size / 3.6) + 12

    def _system(self, conv: Conv, subtype: str, **extra: Any) -> None:
        d = conv.base("system")
        d["subtype"] = subtype
        d.update(extra)
        d["timestamp"] = ts_str(conv.clock)
        d["uuid"] = uid = rand_uuid(conv.rng)
        d["isMeta"] = False
        self._emit(conv, d)
        conv.parent_uuid = uid

    def _maybe_compact(self, conv: Conv) -> None:
        if conv.ctx + conv.pending < COMPACT_AT:
            return
        rng = conv.rng
        pre = conv.ctx + conv.pending
        conv.clock += rng.randint(15_000, 60_000)  # the summarisation call
        self._trigger(conv)
        d = conv.base("system")
        d["parentUuid"] = None
        d["logicalParentUuid"] = conv.parent_uuid
        d["subtype"] = "compact_boundary"
        d["content"] = "Conversation compacted"
        d["isMeta"] = False
        d["timestamp"] = ts_str(conv.clock)
        d["uuid"] = uid = rand_uuid(rng)
        d["level"] = "info"
        d["compactMetadata"] = {"trigger": "auto", "preTokens": pre}
        self._emit(conv, d)
        conv.parent_uuid = uid
        summary_words = rng.randint(600, 2500)
        u = conv.base("user")
        u["message"] = {
            "role": "user",
            "content": "This session is being continued from a previous conversation that ran out of "
            "context. " + self.pool.slice(rng, "prose", summary_words * 5),
        }
        u["isVisibleInTranscriptOnly"] = True
        u["isCompactSummary"] = True
        u["uuid"] = uid = rand_uuid(rng)
        u["timestamp"] = ts_str(conv.clock + 5)
        conv.trigger_ms = conv.clock + 5
        self._emit(conv, u)
        conv.parent_uuid = uid
        conv.ctx = conv.sys_tokens
        conv.pending = int(summary_words * 1.3)
        conv.cached = 0
        conv.last_req_ms = None  # new prefix: nothing of it is cached
        self.stats["compactions"] += 1

    # ---------------------------------------------------------------- sub-agents
    def _run_subagent(self, parent: Conv, tu: dict[str, Any], proj_dir: Path) -> dict[str, Any]:
        rng = parent.rng
        agent_id = "a" + rand_hex(rng, 16)
        stype = tu["input"].get("subagent_type", "general-purpose")
        model = HAIKU if (stype == "Explore" or rng.random() < 0.25) else parent.model
        sub = Conv(
            rng=rng,
            session_id=parent.session_id,
            cwd=parent.cwd,
            version=parent.version,
            branch=parent.branch,
            slug=parent.slug,
            model=model,
            tier=parent.tier,
            sys_tokens=rng.randint(6_000, 14_000),
            clock=parent.clock + rng.randint(20, 400),
            sidechain=True,
            agent_id=agent_id,
            final_usage=parent.final_usage,
        )
        sub.ctx = sub.sys_tokens
        self._trigger(sub)
        start = sub.clock
        # the prompt
        d = sub.base("user")
        d["message"] = {"role": "user", "content": tu["input"].get("prompt", "")}
        d["uuid"] = uid = rand_uuid(rng)
        d["timestamp"] = ts_str(sub.clock)
        d["promptId"] = parent.prompt_id
        self._emit(sub, d)
        sub.parent_uuid = uid
        sub.prompt_id = parent.prompt_id
        sub.pending = len(tu["input"].get("prompt", "")) // 4 + 20
        n_req = lognorm_int(rng, 6, 0.7, 2, 60)
        tool_uses = 0
        usage: dict[str, Any] = {}
        total_tokens = 0
        for i in range(n_req):
            final = i == n_req - 1
            n_tools = 0 if final else (1 if rng.random() < 0.75 else rng.randint(2, 4))
            names = rng.choices(SUB_TOOL_NAMES, SUB_TOOL_WEIGHTS, k=n_tools)
            tus = self._request(sub, final, n_tools, names)
            for t in tus:
                sub.clock += lognorm_int(rng, 400, 1.2, 10, 120_000)
                self._tool_result(sub, t)
                tool_uses += 1
            sub.clock += rng.randint(15, 120)
            self._maybe_compact(sub)
        # last request's usage, as the Task tool result reports it
        usage = {
            k: sub.last_usage[k]
            for k in (
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
                "output_tokens",
            )
        }
        usage["service_tier"] = "standard"
        total_tokens = sum(v for v in usage.values() if isinstance(v, int))
        path = proj_dir / parent.session_id / "subagents" / f"agent-{agent_id}.jsonl"
        self._write(path, sub.lines)
        meta = {"agentType": stype, "description": tu["input"].get("description", "")}
        (path.with_suffix(".meta.json")).write_bytes(orjson.dumps(meta))
        self.stats["subagent_files"] += 1
        return {
            "agent_id": agent_id,
            "end": sub.clock,
            "text": self.pool.slice(rng, "prose", lognorm_int(rng, 1200, 0.8, 80, 12_000)),
            "duration_ms": sub.clock - start,
            "total_tokens": total_tokens,
            "tool_uses": tool_uses,
            "usage": usage,
        }

    # ---------------------------------------------------------------- sessions
    def _pick_version(self, rng: random.Random, day: float, lag: int) -> str:
        released = [v for v, rel in VERSIONS if rel <= day]
        behind = lag + (0 if rng.random() < 0.6 else rng.randint(0, 2))
        return released[max(0, len(released) - 1 - behind)]

    def _session_start(self, rng: random.Random) -> int:
        while True:
            day = rng.randrange(WINDOW_DAYS)
            weekday = (WINDOW_START + dt.timedelta(days=day)).weekday()
            if weekday >= 5 and rng.random() < 0.6:
                continue
            break
        # users across time zones: a broad bump over 06:00-23:00 UTC, some at night
        hour = rng.gauss(14.5, 4.0) % 24
        return WINDOW_START_MS + day * DAY_MS + int(hour * 3_600_000) + rng.randrange(3_600_000 // 60) * 60

    def _session(self, idx: int) -> None:
        rng = random.Random(self.seed * 1_000_003 + idx)
        p = self.projects[rng.choices(range(len(self.projects)), self.project_weights)[0]]
        start = self._session_start(rng)
        version = self._pick_version(rng, (start - WINDOW_START_MS) / DAY_MS, p["lag"])
        r = rng.random()
        if r < 0.05:
            model = HAIKU
        elif r < 0.05 + 0.25 + 0.4 * p["opus_bias"]:
            model = "claude-opus-4-5-20251101"
        else:
            model = "claude-sonnet-4-5-20250929"
        tier = p["tier"] if rng.random() < 0.95 else "mixed"
        conv = Conv(
            rng=rng,
            session_id=rand_uuid(rng),
            cwd=p["cwd"],
            version=version,
            branch=rng.choice(["main", "main", "master", f"feat/{rng.choice(_IDENTS)}", ""]),
            slug="-".join(rng.choices(_WORDS, k=3)),
            model=model,
            tier=tier,
            sys_tokens=p["sys"] + rng.randint(-1500, 3000),
            clock=start,
            final_usage=vtuple(version) >= FINAL_USAGE_FROM,
        )
        conv.ctx = conv.sys_tokens
        proj_dir = self.out / "projects" / p["dir"]
        self.project_dirs.add(p["dir"])
        if rng.random() < 0.12:  # summaries of a previous conversation at the top
            for _ in range(rng.randint(1, 3)):
                self._emit(
                    conv,
                    {
                        "type": "summary",
                        "summary": " ".join(rng.choices(_WORDS, k=6)).capitalize(),
                        "leafUuid": rand_uuid(rng),
                    },
                )
        n_turns = lognorm_int(rng, 2, 1.1, 1, 80)
        for turn in range(n_turns):
            if turn:
                g = rng.random()
                if g < 0.55:
                    gap = rng.randint(5_000, 120_000)
                elif g < 0.78:
                    gap = rng.randint(120_000, 300_000)
                elif g < 0.95:
                    gap = rng.randint(300_000, 2_700_000)
                else:
                    gap = rng.randint(3_600_000, 8 * 3_600_000)
                conv.clock += gap
            turn_start = conv.clock
            if rng.random() < 0.05:
                self._emit(
                    conv,
                    {
                        "type": "queue-operation",
                        "operation": "enqueue",
                        "timestamp": ts_str(conv.clock),
                        "sessionId": conv.session_id,
                        "content": "continue",
                    },
                )
                self._emit(
                    conv,
                    {
                        "type": "queue-operation",
                        "operation": "dequeue",
                        "timestamp": ts_str(conv.clock + 3),
                        "sessionId": conv.session_id,
                    },
                )
            self._user_prompt(conv)
            conv.clock += rng.randint(30, 400)
            n_req = lognorm_int(rng, 3, 0.9, 1, 120)
            for i in range(n_req):
                final = i == n_req - 1
                if final:
                    n_tools, names = 0, []
                else:
                    n_tools = 1 if rng.random() < 0.8 else rng.randint(2, 4)
                    names = rng.choices(TOOL_NAMES, TOOL_WEIGHTS, k=n_tools)
                    if rng.random() < 0.035:
                        names[0] = "Task"
                        if n_tools > 1 and rng.random() < 0.4:
                            names[1] = "Task"
                tus = self._request(conv, final, n_tools, names)
                # Task calls run their sub-agents concurrently; everything else runs in turn
                tasks = [t for t in tus if t["name"] == "Task"]
                results: dict[str, dict[str, Any]] = {}
                t0 = conv.clock
                end = t0
                for t in tasks:
                    conv.clock = t0
                    results[t["id"]] = res = self._run_subagent(conv, t, proj_dir)
                    end = max(end, res["end"])
                conv.clock = end
                for t in tus:
                    if t["name"] == "Task":
                        conv.clock += rng.randint(20, 200)
                        self._tool_result(conv, t, results[t["id"]])
                    else:
                        conv.clock += lognorm_int(rng, 600, 1.3, 15, 400_000)
                        self._tool_result(conv, t)
                conv.clock += rng.randint(15, 150)
                self._maybe_compact(conv)
            self._system(conv, "turn_duration", durationMs=conv.clock - turn_start)
        self._write(proj_dir / f"{conv.session_id}.jsonl", conv.lines)
        self.stats["sessions"] += 1

    def _write(self, path: Path, lines: list[bytes]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(lines) + b"\n"
        path.write_bytes(data)
        self.stats["files"] += 1
        self.stats["lines"] += len(lines)
        self.stats["bytes"] += len(data)

    # ---------------------------------------------------------------- driver
    def run(self) -> dict[str, Any]:
        idx = 0
        while self.stats["bytes"] < self.target:
            self._session(idx)
            idx += 1
        return self.expected()

    def expected(self) -> dict[str, Any]:
        days = [{"day": d, **day_totals(self.days[d])} for d in sorted(self.days)]
        totals: Counter[str] = Counter()
        for t in self.days.values():
            totals.update(t)
        st = self.stats
        return {
            "generator": "benchmarks/gen_claude_corpus.py",
            "seed": self.seed,
            "target_bytes": self.target,
            "timezone": "UTC",
            "semantics": (
                "one count per simulated API request (synthetic error lines excluded), final output_tokens, "
                "cache_write = ephemeral_5m + ephemeral_1h, day = UTC day of the request's block lines"
            ),
            "corpus": {
                "projects": len(self.project_dirs),
                **{k: st[k] for k in CORPUS_KEYS},
            },
            "totals": day_totals(totals),
            "days": days,
        }


def generate_corpus(out: Path | str, size_mb: float = 420.0, seed: int = 7) -> dict[str, Any]:
    """Write the corpus under ``out`` (empty or absent); returns what ``expected.json`` holds."""
    out = Path(out)
    projects = out / "projects"
    if projects.exists() and any(projects.iterdir()):
        raise FileExistsError(f"{projects} is not empty; use a fresh --out")
    out.mkdir(parents=True, exist_ok=True)
    gen = CorpusGenerator(out, int(size_mb * 1024 * 1024), seed)
    expected = gen.run()
    (out / "expected.json").write_bytes(
        orjson.dumps(expected, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    )
    return expected


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="corpus root (CLAUDE_CONFIG_DIR); must be empty")
    ap.add_argument("--size-mb", type=float, default=420.0, help="JSONL bytes to write, in MiB (default 420)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    exp = generate_corpus(args.out, args.size_mb, args.seed)
    c = exp["corpus"]
    print(
        f"wrote {c['bytes'] / 2**20:.1f} MiB in {c['files']} files ({c['sessions']} sessions, "
        f"{c['subagent_files']} sub-agent files, {c['projects']} projects, {c['lines']} lines, "
        f"{c['requests']} requests, {len(exp['days'])} days) to {args.out} "
        f"in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
