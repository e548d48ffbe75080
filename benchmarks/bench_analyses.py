"""Benchmark the analyses on a synthetic lake: wall time and peak RSS of `mix`, `gaps`, `sessions`,
`working-set` (and optionally `ttl`, `load`) run as CLI subprocesses.

    python benchmarks/bench_analyses.py generate --requests 10000000 --sessions 100000 --out /tmp/tfbench/10m
    python benchmarks/bench_analyses.py run --data /tmp/tfbench/10m --label 10M [--json out.json]
    python benchmarks/bench_analyses.py all --scales 10M,100M --root /tmp/tfbench   # generate, run, delete

The lake is written straight to Parquet by DuckDB, laid out like a real one
(``<out>/v1/requests/dt=YYYY-MM-DD/*.parquet``, zstd, the lake's column types), in time order within
each partition (as a collector writes it: sessions interleave), one file per partition (as after
``traceflow compact``).

Synthetic sessions: Poisson arrivals spread over ``--days`` days; ``requests / sessions`` requests
each; five requests per user turn (one prompt_id); every 10th session runs a 20-request sub-agent;
context grows 700 tokens per request from 18k and drops back at request 70 (a compaction); every 3rd
session pauses 400 s before request 25 and every 7th pauses 20 min before request 50 (a resume),
those requests re-write their whole context. Pseudo-random parts come from ``hash()``, so a lake is
the same every time. Never write the lake inside the repository: it is tens of GB at 100M.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SCALES = {"1M": (1_000_000, 10_000), "10M": (10_000_000, 100_000), "100M": (100_000_000, 1_000_000)}
EPOCH_2026_08_01_US = 1_785_542_400_000_000  # 2026-08-01T00:00:00Z

_MODELS = "['claude-sonnet-4-5-20250929', 'claude-opus-4-5-20251101', 'claude-haiku-4-5-20251001']"


def generate(
    out: Path, requests: int, sessions: int, days: int = 30, threads: int | None = None
) -> dict[str, float]:
    """Write the synthetic lake under ``out``; returns rows, files, bytes and seconds."""
    import duckdb

    per_session = requests // sessions
    if per_session < 1 or per_session * sessions != requests:
        raise SystemExit("--requests must be a multiple of --sessions")
    repo = Path(__file__).resolve().parents[1]
    if out.resolve().is_relative_to(repo):
        raise SystemExit(f"refusing to write a benchmark lake inside the repository ({out})")
    table_dir = out / "v1" / "requests"
    if table_dir.exists():
        shutil.rmtree(table_dir)
    table_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = true")
    if threads:
        con.execute(f"SET threads = {threads}")
    span_us = days * 86_400 * 1_000_000
    mean_gap_us = span_us / sessions
    # Sessions: Poisson arrivals (exponential inter-arrival times from a hash-based uniform).
    con.execute(
        f"""
        CREATE TABLE sessions AS
        SELECT s,
               {EPOCH_2026_08_01_US} + CAST(sum(-ln(1 - ((hash(s, 'arrival') % 1000003) + 0.5) / 1000004.0)
                     * {mean_gap_us}) OVER (ORDER BY s ROWS UNBOUNDED PRECEDING) AS BIGINT) AS start_us,
               md5('session-' || s) AS sid,
               'agent-' || substr(md5('sub-' || s), 1, 17) AS sub_id,
               substr(md5('user-' || (s % 5000)), 1, 16) AS user_id
        FROM range({sessions}) r(s)
        """
    )
    con.execute(
        f"ALTER TABLE sessions ADD COLUMN day INTEGER; "
        f"UPDATE sessions SET day = CAST((start_us - {EPOCH_2026_08_01_US}) // 86400000000 AS INTEGER)"
    )
    max_day = con.execute("SELECT max(day) FROM sessions").fetchone()[0]  # type: ignore[index]
    last_day = int(max_day) + 1  # a session lasts under a day, so the last spills into one more
    for day in range(last_day + 1):
        lo_us = EPOCH_2026_08_01_US + day * 86_400_000_000
        part = table_dir / f"dt={time.strftime('%Y-%m-%d', time.gmtime(lo_us / 1e6))}"
        part.mkdir()
        # One file per partition (as after `traceflow compact`): the requests that start on this
        # day, from the sessions that started on it or the day before.
        con.execute(
            f"""
            COPY (
              WITH req AS (
                SELECT s.s, s.sid, s.sub_id, s.user_id, s.start_us, n,
                       n // 5 AS turn,
                       (s.s % 10 = 0 AND n >= 40 AND n < 60) AS is_sub,
                       n % 70 = 0 OR (s.s % 3 = 0 AND n = 25) OR (s.s % 7 = 0 AND n = 50) AS cold,
                       s.start_us + n * 12000000 + (n // 5) * 40000000
                         + CASE WHEN s.s % 3 = 0 AND n >= 25 THEN 400000000 ELSE 0 END
                         + CASE WHEN s.s % 7 = 0 AND n >= 50 THEN 1200000000 ELSE 0 END
                         + CAST(hash(s.s, n, 'jitter') % 8000000 AS BIGINT) AS t_us,
                       2000000 + CAST(hash(s.s, n, 'dur') % 6000000 AS BIGINT) AS dur_us,
                       18000 + 700 * (n % 70) AS ctx,
                       50 + CAST(hash(s.s, n, 'out') % 400 AS BIGINT) AS out_tokens
                FROM sessions s, range({per_session}) r(n)
                WHERE s.day IN ({day - 1}, {day})
              )
              SELECT md5(sid || ':' || n) AS event_id,
                     'synthetic' AS source,
                     'claude-code' AS agent,
                     '2.1.90' AS agent_version,
                     user_id,
                     CASE WHEN is_sub THEN sub_id ELSE sid END AS session_id,
                     CASE WHEN is_sub THEN sid END AS parent_session_id,
                     md5(sid || ':turn:' || turn) AS prompt_id,
                     'req_' || s || '_' || n AS request_id,
                     to_timestamp(t_us / 1e6) AS started_at,
                     to_timestamp((t_us + dur_us) / 1e6) AS ended_at,
                     dur_us / 1000.0 AS duration_ms,
                     CAST(NULL AS DOUBLE) AS ttft_ms,
                     {_MODELS}[1 + s % 3] AS model,
                     3::BIGINT AS cold_input_tokens,
                     CASE WHEN cold THEN 0 ELSE ctx - 703 END::BIGINT AS cache_read_tokens,
                     CASE WHEN cold THEN ctx - 3 ELSE 700 END::BIGINT AS cache_write_tokens,
                     CASE WHEN cold THEN ctx - 3 ELSE 700 END::BIGINT AS cache_write_5m_tokens,
                     0::BIGINT AS cache_write_1h_tokens,
                     out_tokens::BIGINT AS output_tokens,
                     CAST(NULL AS BIGINT) AS reasoning_tokens,
                     CAST(NULL AS DOUBLE) AS cost_usd,
                     '{{"cwd":"/home/u/proj","entrypoint":"cli"}}' AS attributes,
                     n::BIGINT AS seq,
                     CAST(NULL AS BIGINT[]) AS hash_ids,
                     CAST(NULL AS INTEGER) AS block_size,
                     to_timestamp((t_us + dur_us + 1000000) / 1e6) AS ingested_at
              FROM req
              WHERE t_us >= {lo_us} AND t_us < {lo_us + 86_400_000_000}
              ORDER BY t_us
            ) TO '{part}/bench-{day:03d}.parquet' (FORMAT parquet, COMPRESSION zstd)
            """
        )
    con.close()
    files = list(table_dir.glob("dt=*/*.parquet"))
    # Every event_id is unique by construction (md5 of session and index), so the files are what
    # `traceflow compact` would write: record them as the deduplicated base, as compact does.
    marker = out / "v1" / "_state" / "deduped" / "requests.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(sorted(str(f.relative_to(table_dir)) for f in files)))
    return {
        "requests": requests,
        "sessions": sessions,
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "seconds": round(time.perf_counter() - t0, 1),
    }


_ORIGINAL_VIEW_SQL: Any = None


def proposed_view_sql(lake: object, name: str) -> str:
    """The lake's view with the event_id dedup only over partitions holding more than one file.

    This is the change proposed to ``Lake.view_sql``: a partition with a single file (compacted,
    or written once) has no duplicates inside it, and a request's copies share its partition (the
    partition comes from the request's own timestamps), so its rows need no window.
    """
    from traceflow.schema import REQUESTS, TABLES
    from traceflow.store.lake import Lake
    from traceflow.store.measures import dedup_order, request_columns_sql

    assert isinstance(lake, Lake)
    spec = TABLES[name]
    files = lake.files(name)
    by_part: dict[str, list[Path]] = {}
    for f in files:
        by_part.setdefault(f.parent.name, []).append(f)
    single = [fs[0] for fs in by_part.values() if len(fs) == 1]
    multi = [f for fs in by_part.values() if len(fs) > 1 for f in fs]
    if not files:
        return str(_ORIGINAL_VIEW_SQL(lake, name))
    typed = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in spec.columns.items())

    def src(paths: list[Path]) -> str:
        listing = ", ".join(f"'{p}'" for p in paths)
        return f"read_parquet([{listing}], union_by_name = true, hive_partitioning = false)"

    order = dedup_order(name)
    parts = []
    if single:
        parts.append(f"SELECT {typed} FROM {src(single)}")
    if multi:
        parts.append(
            f"SELECT {typed} FROM {src(multi)} "
            f"QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY {order}) = 1"
        )
    raw = " UNION ALL ".join(f"({p})" for p in parts)
    extra = f", {request_columns_sql()}" if name == REQUESTS.name else ""
    return f"CREATE OR REPLACE VIEW {name} AS SELECT * {extra} FROM ({raw})"


def _cli(argv: list[str]) -> None:
    """Run ``traceflow`` with the analysis commands; ``--proposed-view`` first patches the views,
    ``--memory-limit X`` sets DuckDB's memory limit (and a spill folder) on every connection."""
    from traceflow.store.lake import Lake

    if argv and argv[0] == "--proposed-view":
        global _ORIGINAL_VIEW_SQL
        _ORIGINAL_VIEW_SQL = Lake.view_sql
        Lake.view_sql = proposed_view_sql  # type: ignore[method-assign,assignment]
        argv = argv[1:]
    if argv and argv[0] == "--memory-limit":
        limit, argv = argv[1], argv[2:]
        connect = Lake.connect

        def limited(self: Lake, tables: Any = None) -> Any:
            con = connect(self, tables)
            con.execute(f"SET memory_limit = '{limit}'")
            spill = self.root / "v1" / "_state" / "duckdb-tmp"
            spill.mkdir(parents=True, exist_ok=True)
            con.execute(f"SET temp_directory = '{spill}'")
            return con

        Lake.connect = limited  # type: ignore[method-assign]
    sys.argv = ["traceflow", *argv]
    from traceflow.cli.app import main

    main()


#: command name -> extra CLI arguments (JSON output so the whole result is produced and printed)
COMMANDS: dict[str, list[str]] = {
    # first, once: stores the per-request steps (the requests are already one deduplicated base)
    "compact": ["compact"],
    "mix": ["mix"],
    "gaps": ["gaps"],
    "sessions": ["sessions"],
    "working-set": ["working-set"],
    "ttl": ["ttl"],
    "load": ["load"],
}


def _time_v(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run under /usr/bin/time -v: wall s, CPU s (user + sys), peak RSS MB, exit code, load average."""
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    # run outside the repository: DuckDB spills into .tmp of the working directory by default
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *argv], capture_output=True, text=True, env=env, cwd=env["TRACEFLOW_DATA"]
    )
    wall = time.perf_counter() - t0

    def field(name: str) -> float:
        m = re.search(rf"{re.escape(name)}: ([\d.]+)", proc.stderr)
        return float(m.group(1)) if m else float("nan")

    if proc.returncode != 0:
        print(f"{argv} failed ({proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(field("User time (seconds)") + field("System time (seconds)"), 2),
        "peak_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024),
        "exit": proc.returncode,
        "load_1m": round((load_before + os.getloadavg()[0]) / 2, 1),
    }


def run(
    data: Path,
    label: str,
    commands: list[str],
    repeat: int = 1,
    view: str = "lake",
    memory_limit: str | None = None,
) -> list[dict[str, object]]:
    """Time each command (the run with the least CPU time of ``repeat``) on the lake in ``data``.

    ``view``: ``lake`` runs the views as they are; ``proposed`` skips the dedup window for
    single-file partitions (:func:`proposed_view_sql`).
    """
    env = dict(os.environ, TRACEFLOW_DATA=str(data))
    results = []
    for name in commands:
        flag = ["--proposed-view"] if view == "proposed" else []
        if memory_limit:
            flag += ["--memory-limit", memory_limit]
        argv = [
            sys.executable,
            __file__,
            "_cli",
            *flag,
            *COMMANDS[name],
            "--data",
            str(data),
            "--format",
            "json",
        ]
        runs = [_time_v(argv, env) for _ in range(repeat)]
        best = min(runs, key=lambda r: r["cpu_s"])
        row: dict[str, object] = {
            "scale": label,
            "view": view,
            "memory_limit": memory_limit,
            "command": name,
            **best,
        }
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--requests", type=int, required=True)
    g.add_argument("--sessions", type=int, required=True)
    g.add_argument("--days", type=int, default=30)
    g.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("run")
    r.add_argument("--data", type=Path, required=True)
    r.add_argument("--label", default="")
    r.add_argument("--commands", default="compact,mix,gaps,sessions,working-set")
    r.add_argument("--repeat", type=int, default=1)
    r.add_argument("--view", choices=("lake", "proposed"), default="lake")
    r.add_argument("--memory-limit", help="DuckDB memory_limit for the commands, e.g. 6GB")
    r.add_argument("--json", type=Path)
    a = sub.add_parser("all")
    a.add_argument("--scales", default="10M")
    a.add_argument("--root", type=Path, default=Path("/tmp/tfbench"))
    a.add_argument("--commands", default="compact,mix,gaps,sessions,working-set")
    a.add_argument("--keep", action="store_true", help="do not delete the lakes afterwards")
    a.add_argument("--views", default="lake")
    a.add_argument("--json", type=Path)
    if len(sys.argv) > 1 and sys.argv[1] == "_cli":
        _cli(sys.argv[2:])
        return
    args = ap.parse_args()
    if args.cmd == "generate":
        print(json.dumps(generate(args.out, args.requests, args.sessions, args.days)))
    elif args.cmd == "run":
        rows = run(
            args.data,
            args.label or args.data.name,
            args.commands.split(","),
            args.repeat,
            args.view,
            args.memory_limit,
        )
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))
    else:
        rows = []
        for scale in args.scales.split(","):
            n, s = SCALES[scale]
            out = args.root / scale.lower()
            info = generate(out, n, s)
            print(json.dumps({"generated": scale, **info}), flush=True)
            try:
                for view in args.views.split(","):
                    rows += run(out, scale, args.commands.split(","), view=view)
            finally:
                if not args.keep:
                    shutil.rmtree(out, ignore_errors=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
