"""`report --html`, `mix --by day` and `misses` against hand-written DuckDB SQL of the same figures
(issue 34), on generated lakes of 1M, 3M and 10M requests.

    python benchmarks/bench_report.py --scales 1M,3M [--runs 3] [--root /tmp/tfbench-report] [--json out.json]
    python benchmarks/bench_report.py sql --what report --data DIR   # one baseline run, as timed

The lakes are ``bench_analyses.py``'s (written straight to Parquet by DuckDB, one file per day, 100
requests per session, every 10th session with a sub-agent, compactions, idle returns; uncompacted: no
stored steps or rollup). Each work runs as a fresh process (``python -m traceflow ...`` with
``TRACEFLOW_REFRESH=0`` and ``TRACEFLOW_CACHE=0``; the SQL as ``python bench_report.py sql ...``, one
DuckDB connection over the same Parquet files), alternating traceflow and its SQL ``--runs`` times;
reported are the medians (and ranges) of CPU seconds (user + sys, ``/usr/bin/time -v``), wall seconds
and peak RSS, and the ratio traceflow / SQL of the median CPU and of the median peak RSS.

The SQL of each work (:data:`SQL`), written as an analyst would over the raw files:

* ``mix``: per day and model, the requests and the four kinds' sums (costs priced per model in
  Python with traceflow's price list, the only Python beside the queries);
* ``misses``: the per-stream window (previous request's context and model, the latest earlier end,
  the TTL of the last write), each request classed hit or miss with a cause, counted per cause and model;
* ``report`` (its main figures): the window as a temporary table, then ``mix`` (per model), the gap
  percentiles and histogram, ``misses`` per cause and model, and the KV working set at 5 min and 1 h
  (the sweep of each request's context held until the TTL or the stream's next end, per minute).

Before timing, the bench checks that the SQL gives the same figures as traceflow (the mix per day, the
misses per cause, the gap count and median). Results: benchmarks/README.md ("The report at 1M and 3M").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SCALES = {"1M": (1_000_000, 10_000), "3M": (3_000_000, 30_000), "10M": (10_000_000, 100_000)}

WINDOW = """
CREATE TEMP TABLE w AS
SELECT *,
       row_number() OVER s AS position,
       lag(cold_input_tokens + cache_read_tokens + cache_write_tokens) OVER s AS prev_context,
       lag(model) OVER s AS prev_model,
       max(ended_at) OVER (s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
       lead(ended_at) OVER s AS next_end,
       coalesce(last_value(CASE WHEN cache_write_tokens > 0
                                THEN CASE WHEN coalesce(cache_write_1h_tokens, 0)
                                               > coalesce(cache_write_5m_tokens, 0)
                                          THEN 3600 ELSE 300 END END IGNORE NULLS)
                OVER (s ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 300) AS ttl_in_force_s
FROM (SELECT *, cold_input_tokens + cache_read_tokens + cache_write_tokens AS context
      FROM read_parquet({files}) WHERE cold_input_tokens + cache_read_tokens + cache_write_tokens
                                       + output_tokens > 0)
WINDOW s AS (PARTITION BY session_id, parent_session_id ORDER BY started_at, seq)
"""

MIX = """
SELECT strftime(started_at AT TIME ZONE 'UTC', '%Y-%m-%d') AS day, model, count(*) AS requests,
       sum(cold_input_tokens), sum(cache_read_tokens), sum(cache_write_tokens), sum(output_tokens),
       sum(coalesce(cache_write_1h_tokens, 0))
FROM {src} GROUP BY ALL ORDER BY ALL
"""

MISSES = """
WITH j AS (
    SELECT *, CASE WHEN position = 1 THEN 0 ELSE least(prev_context, context) END AS reusable,
           greatest(epoch(started_at) - epoch(prev_end), 0) AS gap_s
    FROM {src}
),
m AS (
    SELECT *, position = 1 OR cache_read_tokens < reusable - 1024 AS miss FROM j
)
SELECT CASE WHEN position = 1 THEN 'first_request'
            WHEN model IS DISTINCT FROM prev_model THEN 'model_switch'
            WHEN context < 0.5 * prev_context THEN 'compaction'
            WHEN gap_s > ttl_in_force_s THEN 'ttl_expired'
            ELSE 'unexplained' END AS cause,
       model, ttl_in_force_s, count(*) AS misses,
       sum(CASE WHEN position = 1 THEN 0 ELSE greatest(reusable - cache_read_tokens, 0) END) AS missed_tokens
FROM m WHERE miss GROUP BY ALL ORDER BY ALL
"""

GAPS = """
WITH g AS (SELECT greatest(epoch(started_at) - epoch(prev_end), 0) AS gap_s FROM w WHERE position > 1)
SELECT count(*), quantile_cont(gap_s, [0.5, 0.9, 0.99]), avg(gap_s),
       count(*) FILTER (WHERE gap_s > 300), count(*) FILTER (WHERE gap_s > 3600),
       histogram(CASE WHEN gap_s < 1 THEN 0 ELSE floor(log10(gap_s) * 3) END)
FROM g
"""

WORKING_SET = """
WITH held AS (
    SELECT epoch_us(ended_at) AS t0,
           least(epoch_us(ended_at) + {ttl}::BIGINT * 1000000,
                 coalesce(epoch_us(next_end), epoch_us(ended_at) + {ttl}::BIGINT * 1000000)) AS t1,
           context AS tokens
    FROM w
),
d AS (
    SELECT floor(CASE WHEN e.s = 1 THEN t0 ELSE t1 END / 60e6)::BIGINT AS bucket, sum(e.s * tokens) AS dt
    FROM held, (VALUES (1), (-1)) e(s) WHERE t1 > t0 GROUP BY 1
),
level AS (SELECT bucket, sum(dt) OVER (ORDER BY bucket) AS tokens FROM d)
SELECT max(tokens), quantile_cont(tokens, 0.95), avg(tokens) FROM level
"""


def run_sql(what: str, data: Path) -> dict[str, Any]:
    """Run the baseline ``what`` over the lake's Parquet files; its figures, JSON-ready."""
    import duckdb

    files = sorted(str(p) for p in (data / "v1" / "requests").glob("dt=*/*.parquet"))
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    src = f"read_parquet({files!r})"
    out: dict[str, Any] = {}
    if what == "mix":
        out["mix"] = _priced(con.execute(MIX.format(src=src)).fetchall())
    elif what == "misses":  # one statement: the window as a subquery (one query needs no table)
        window = WINDOW.format(files=repr(files)).replace("CREATE TEMP TABLE w AS", "", 1)
        out["misses"] = _by_cause(con.execute(MISSES.format(src=f"({window})")).fetchall())
    elif what == "report":
        con.execute(WINDOW.format(files=repr(files)))
        out["mix"] = _priced(con.execute(MIX.format(src="w")).fetchall())
        out["gaps"] = con.execute(GAPS).fetchall()[0][:2]
        out["misses"] = _by_cause(con.execute(MISSES.format(src="w")).fetchall())
        out["working_set"] = [con.execute(WORKING_SET.format(ttl=t)).fetchall()[0] for t in (300, 3600)]
    else:
        raise SystemExit(f"unknown work {what!r}: mix, misses or report")
    return json.loads(json.dumps(out, default=str))


def _priced(rows: list[tuple[Any, ...]]) -> dict[str, dict[str, float]]:
    """Per day: requests, tokens and the billed cost (traceflow's price list, per model)."""
    from traceflow.prices import PriceModel

    pm = PriceModel()
    days: dict[str, dict[str, float]] = {}
    for day, model, n, cold, read, write, output, write_1h in rows:
        d = days.setdefault(day, {"requests": 0, "tokens": 0, "cost_usd": 0.0})
        d["requests"] += n
        d["tokens"] += cold + read + write + output
        d["cost_usd"] += pm.cost(model, cold, read, write, output, write_1h)
    return days


def _by_cause(rows: list[tuple[Any, ...]]) -> dict[str, dict[str, float]]:
    from traceflow.analysis.misses import miss_cost
    from traceflow.prices import PriceModel

    pm = PriceModel()
    out: dict[str, dict[str, float]] = {}
    for cause, model, ttl, n, missed in rows:
        c = out.setdefault(cause, {"misses": 0, "missed_tokens": 0, "miss_cost_usd": 0.0})
        c["misses"] += n
        c["missed_tokens"] += int(missed)
        c["miss_cost_usd"] += miss_cost(pm, model, ttl, int(missed)) or 0.0
    return out


def _traceflow(*argv: str, data: Path) -> list[str]:
    return [sys.executable, "-m", "traceflow", *argv, "--data", str(data)]


def _works(data: Path, scratch: Path) -> dict[str, tuple[list[str], list[str]]]:
    me = [sys.executable, str(Path(__file__).resolve()), "sql", "--data", str(data), "--what"]
    html = str(scratch / "report.html")
    return {
        "report --html": (_traceflow("report", "--html", html, data=data), [*me, "report"]),
        "report --html --capacity": (
            _traceflow("report", "--html", html, "--capacity", data=data),
            [*me, "report"],
        ),
        "mix --by day": (_traceflow("mix", "--by", "day", "--format", "json", data=data), [*me, "mix"]),
        "misses": (_traceflow("misses", "--format", "json", data=data), [*me, "misses"]),
    }


def _env(tree: Path | None = None) -> dict[str, str]:
    """The environment of a timed process: traceflow from ``tree`` (None: this checkout)."""
    env = dict(os.environ, TRACEFLOW_REFRESH="0", TRACEFLOW_CACHE="0")
    root = tree or Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _before_argv(argv: list[str]) -> list[str]:
    """``argv`` for a checkout from before ``report --capacity``: its report always drew that part."""
    return [a for a in argv if a != "--capacity"]


def _timed(argv: list[str], tree: Path | None = None) -> dict[str, Any]:
    """CPU (user + sys), wall and peak RSS of one process, from /usr/bin/time -v."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        start = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-v", "-o", t.name, *argv],
            env=_env(tree),
            # not a checkout: `python -m traceflow` puts the working directory first on sys.path,
            # before PYTHONPATH, so a run from a checkout would import that one's traceflow
            cwd=tempfile.gettempdir(),
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
        fields = dict(line.strip().split(": ", 1) for line in t.read().splitlines() if ": " in line)
    cpu = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    rss = int(fields["Maximum resident set size (kbytes)"]) / 1024
    return {"cpu_s": cpu, "wall_s": wall, "rss_mib": rss, "stdout": done.stdout}


def compile_trees(*trees: Path | None) -> None:
    """Byte-compile each checkout's ``traceflow`` (None: this one) and this folder, as an install
    does: a timed process then reads cached bytecode, not source (under
    ``PYTHONDONTWRITEBYTECODE=1`` it would compile every module it imports on every run)."""
    import compileall

    for tree in {t or Path(__file__).resolve().parents[1] for t in trees}:
        compileall.compile_dir(str(tree / "traceflow"), quiet=1)
    compileall.compile_dir(str(Path(__file__).resolve().parent), quiet=1)


def check_same(data: Path) -> None:
    """The SQL's figures are traceflow's (mix per day; misses per cause)."""
    sql = run_sql("misses", data)["misses"]
    out = _timed(_traceflow("misses", "--format", "json", data=data))["stdout"]
    causes = json.loads(out)["by_cause"]
    for cause, figures in sql.items():
        assert causes[cause]["misses"] == figures["misses"], (cause, causes[cause], figures)
        assert causes[cause]["missed_tokens"] == figures["missed_tokens"], (cause, causes[cause], figures)
    mix = run_sql("mix", data)["mix"]
    rows = json.loads(_timed(_traceflow("mix", "--by", "day", "--format", "json", data=data))["stdout"])
    rows = rows["rows"] if isinstance(rows, dict) else rows
    for r in rows:
        d = mix[r["day"]]
        assert (r["requests"], r["total_tokens"]) == (d["requests"], d["tokens"]), (r, d)
        assert abs(r["cost_usd"] - d["cost_usd"]) < 1e-6 * max(1.0, d["cost_usd"]), (r, d)


def bench(
    data: Path, runs: int, scratch: Path, only: set[str] | None = None, before: Path | None = None
) -> dict[str, Any]:
    """Each work ``runs`` times, alternating traceflow, its SQL and (``before``: another checkout's
    tree, e.g. ``git archive <commit> | tar -x -C DIR``) the same command from that checkout."""
    results: dict[str, Any] = {}
    for name, (ours, theirs) in _works(data, scratch).items():
        if only and name.split()[0] not in only:
            continue
        seen: dict[str, list[dict[str, Any]]] = {"traceflow": [], "sql": []}
        if before is not None:
            seen["before"] = []
        for _ in range(runs):  # alternating: every side sees the same background load
            seen["traceflow"].append(_timed(ours))
            seen["sql"].append(_timed(theirs))
            if before is not None:
                seen["before"].append(_timed(_before_argv(ours), before))
        row: dict[str, Any] = {}
        for side, samples in seen.items():
            for k in ("cpu_s", "wall_s", "rss_mib"):
                values = [s[k] for s in samples]
                row[f"{side}_{k}"] = statistics.median(values)
                row[f"{side}_{k}_range"] = [min(values), max(values)]
        row["cpu_ratio"] = row["traceflow_cpu_s"] / row["sql_cpu_s"]
        row["rss_ratio"] = row["traceflow_rss_mib"] / row["sql_rss_mib"]
        line = (
            f"  {name}: traceflow {row['traceflow_cpu_s']:.1f} s CPU, {row['traceflow_rss_mib']:.0f} MiB; "
            f"SQL {row['sql_cpu_s']:.1f} s, {row['sql_rss_mib']:.0f} MiB; CPU {row['cpu_ratio']:.2f}x, "
            f"RSS {row['rss_ratio']:.2f}x"
        )
        if before is not None:
            row["before_cpu_ratio"] = row["before_cpu_s"] / row["sql_cpu_s"]
            # the same answer: the printed output (the report's text summary; the HTML has a clock)
            row["same_output_as_before"] = seen["traceflow"][0]["stdout"] == seen["before"][0]["stdout"]
            line += (
                f"; before {row['before_cpu_s']:.1f} s CPU ({row['before_cpu_ratio']:.2f}x), "
                f"{row['before_rss_mib']:.0f} MiB; same output: {row['same_output_as_before']}"
            )
        results[name] = row
        print(line, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "sql"])
    parser.add_argument("--scales", default="1M,3M")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path("/tmp/tfbench-report"))
    parser.add_argument("--data", type=Path, help="sql: the lake")
    parser.add_argument("--what", default="report", help="sql: mix, misses or report")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the generated lakes")
    parser.add_argument("--works", help="only these, comma-separated: report, mix, misses")
    parser.add_argument(
        "--before", type=Path, help="also time this checkout's tree (the same commands), alternating"
    )
    args = parser.parse_args()
    if args.mode == "sql":
        print(json.dumps(run_sql(args.what, args.data)))
        return
    from bench_analyses import generate

    compile_trees(None, args.before)
    out: dict[str, Any] = {}
    for scale in args.scales.split(","):
        requests, sessions = SCALES[scale]
        data = args.root / scale.lower()
        if not (data / "v1" / "requests").exists():
            print(f"{scale}: generating {requests:,} requests ...", flush=True)
            print("  ", generate(data, requests, sessions), flush=True)
        check_same(data)
        print(f"{scale}: the SQL gives traceflow's figures (mix per day, misses per cause)", flush=True)
        with tempfile.TemporaryDirectory() as scratch:
            only = set(args.works.split(",")) if args.works else None
            out[scale] = bench(data, args.runs, Path(scratch), only, args.before)
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))
        if not args.keep:
            import shutil

            shutil.rmtree(data, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
