"""A generated trace (:func:`traceflow.replay.synth.generate`): its requests as rows of the lake's
``requests`` table (source ``synthetic``), written into a lake, or shaped for the exports.

Ids are fresh per run key (``syn-<key>-...``), so two runs never merge; the reported cache is
synthetic (``attributes.cache_derived = "synthetic"``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import orjson

from traceflow.replay.arrays import I64

if TYPE_CHECKING:
    import polars as pl


@dataclass
class SynthTrace:
    """A generated trace: one entry per request, sorted by start time (ties: session, turn)."""

    profile: dict[str, Any]
    key: str
    start_us: int
    session: I64
    turn: I64
    prompt: I64  # prompt index within the session (a new one at the start and after each pause)
    t_us: I64  # start, µs since the epoch
    end_us: I64
    ctx: I64
    out: I64
    read: I64
    drop: npt.NDArray[np.bool_]
    n_sessions: int

    @property
    def n(self) -> int:
        return len(self.t_us)

    def session_ids(self, idx: I64) -> list[str]:
        return [f"syn-{self.key}-{s:07d}" for s in idx.tolist()]

    def lake_frame(self, start: int = 0, stop: int | None = None) -> pl.DataFrame:
        """Rows ``start:stop`` with the lake's ``requests`` schema (source ``synthetic``)."""
        import polars as pl

        from traceflow.schema import REQUESTS

        stop = self.n if stop is None else stop
        sl = slice(start, stop)
        m = stop - start
        key = self.key
        idx = pl.Series("i", np.arange(start, stop, dtype=np.int64))
        sess = pl.Series("s", self.session[sl])
        attrs = orjson.dumps(
            {"synthetic": {"profile": self.profile.get("name"), "key": key}, "cache_derived": "synthetic"}
        ).decode()
        ctx = self.ctx[sl]
        read = self.read[sl]
        dur_ms = (self.end_us[sl] - self.t_us[sl]) / 1000.0
        frame = pl.DataFrame(
            {
                "i": idx,
                "s": sess,
                "p": self.prompt[sl],
                "started_at": self.t_us[sl],
                "ended_at": self.end_us[sl],
                "duration_ms": dur_ms,
                "cache_read_tokens": read,
                "cache_write_tokens": ctx - read,
                "output_tokens": self.out[sl],
            }
        )
        frame = frame.select(
            pl.format("syn-{}-{}", pl.lit(key), pl.col("i")).alias("event_id"),
            pl.lit("synthetic").alias("source"),
            pl.lit(self.profile.get("agent") or "claude-code").alias("agent"),
            pl.lit(None, pl.String).alias("agent_version"),
            pl.lit(None, pl.String).alias("user_id"),
            pl.format("syn-{}-{}", pl.lit(key), pl.col("s").cast(pl.String).str.zfill(7)).alias("session_id"),
            pl.lit(None, pl.String).alias("parent_session_id"),
            pl.format(
                "syn-{}-{}-p{}", pl.lit(key), pl.col("s").cast(pl.String).str.zfill(7), pl.col("p")
            ).alias("prompt_id"),
            pl.format("req_syn_{}_{}", pl.lit(key), pl.col("i")).alias("request_id"),
            pl.col("started_at"),
            pl.col("ended_at"),
            pl.col("duration_ms"),
            pl.lit(None, pl.Float64).alias("ttft_ms"),
            pl.lit(self.profile.get("model") or "synthetic").alias("model"),
            pl.lit(0, pl.Int64).alias("cold_input_tokens"),
            pl.col("cache_read_tokens"),
            pl.col("cache_write_tokens"),
            pl.lit(None, pl.Int64).alias("cache_write_5m_tokens"),
            pl.lit(None, pl.Int64).alias("cache_write_1h_tokens"),
            pl.col("output_tokens"),
            pl.lit(None, pl.Int64).alias("reasoning_tokens"),
            pl.lit(None, pl.Float64).alias("cost_usd"),
            pl.lit(attrs).alias("attributes"),
            pl.col("i").alias("seq"),
            pl.lit(None, pl.List(pl.Int64)).alias("hash_ids"),
            pl.lit(None, pl.Int32).alias("block_size"),
            pl.lit(None, pl.Int64).alias("ingested_at"),
        )
        del m
        now = int(dt.datetime.now(dt.UTC).timestamp() * 1_000_000)
        frame = frame.with_columns(pl.col("ingested_at").fill_null(now))
        return frame.cast(dict(REQUESTS.schema))  # type: ignore[arg-type]

    def replay_frame(self) -> pl.DataFrame:
        """The trace shaped as :func:`traceflow.replay.requests.load_requests` returns requests."""
        import polars as pl

        lf = self.lake_frame()
        return lf.select(
            "session_id",
            "parent_session_id",
            "prompt_id",
            "model",
            "user_id",
            "agent",
            "source",
            "request_id",
            pl.col("started_at").dt.epoch("us").alias("t_us"),
            pl.col("ended_at").dt.epoch("us").alias("end_us"),
            (pl.col("cache_read_tokens") + pl.col("cache_write_tokens")).alias("ctx"),
            pl.col("output_tokens").alias("out"),
            pl.col("cache_read_tokens").alias("read"),
            pl.lit(False).alias("measured"),
            "hash_ids",
            pl.col("block_size").alias("src_block"),
            pl.lit(None, pl.String).alias("scope"),
            "duration_ms",
            "ttft_ms",
            "seq",
            "event_id",
        )


def write_lake(trace: SynthTrace, lake: Any, chunk: int = 1_000_000) -> int:
    """Append ``trace`` to the lake's ``requests`` (source ``synthetic``); returns the rows written."""
    written = 0
    for a in range(0, trace.n, chunk):
        frame = trace.lake_frame(a, min(a + chunk, trace.n))
        lake.append("requests", frame)
        written += frame.height
    return written
