-- steps: one row per request in stream order: its stream, position, gap, kind and reusable prefix.
-- This is the per-request window, written once: the per-stream queries (gaps, gap_histogram,
-- idle_returns, compactions, sessions, ttl, ttl_validation, working_set, load, misses) read its rows as
-- request_steps. A stream is one (session_id, parent_session_id), so a sub-agent is its own stream;
-- requests are ordered by (started_at, seq); gap_s is the idle time since the earlier requests of the
-- stream had all ended (the latest end among them; clamped at 0, NULL for the first); kind is agent
-- (same prompt_id), human (new prompt_id) or unknown; prefix_tokens is the previous request's context
-- plus its output, at most this request's context; event_id names the request (the attribution of
-- --by project|host|attr:NAME joins on it). Requests without tokens are left out.
-- The window always runs over the whole lake: a selection narrows the rows reported, never what a
-- request is compared with, so the first request of a selection keeps its previous request (and a
-- request's row is the same in every selection that holds it). $since and $until select the rows
-- after the window; each per-stream query applies the selection to request_steps the same way.
-- DuckDB dialect: epoch_us, hash.
-- traceflow supplies request_steps to a per-stream query: the rows `traceflow compact` stored for
-- the whole lake (while no request file was added since), else this query over the whole lake, as a
-- CTE of the query (over the sessions that have a selected request, every request of those kept:
-- the same rows). In a bare DuckDB that has the views, create it first (a view cannot take
-- parameters; bind $since and $until to NULL for the whole lake), then run the file:
--     con.execute("CREATE TEMP TABLE request_steps AS " + steps_sql, {"since": None, "until": None})
--     con.execute(idle_returns_sql, {"since": None, "until": None, "idle_after_s": 900})
-- params:  $since TIMESTAMPTZ = NULL  only rows of requests at or after this time
--          $until TIMESTAMPTZ = NULL  only rows of requests before this time
-- returns: root_session_id, root_key, is_main, session_id, parent_session_id, agent, model, user_id,
--          source, prompt_id, prompt_key, t_start, t_end, t_start_us, t_end_us, context_tokens,
--          cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
--          agent_version, cache_write_5m_tokens, cache_write_1h_tokens, event_id, position,
--          prev_end_us, next_end_us, prev_prompt_key, prev_context_tokens, prev_output_tokens,
--          prev_model, prev_cache_write_5m_tokens, prev_cache_write_1h_tokens, prev_write_ttl_s,
--          first_read_tokens, gap_s, kind, prefix_tokens, gap_bin

WITH sel AS (
    -- every request of the lake; requests without tokens (failed calls) neither read nor write a cache.
    -- roots: traceflow narrows the window to the sessions (sub-agents included) that have a selected
    -- request, whose every request it keeps: each row's window reads its own stream only, so the
    -- selected rows are the same as over the whole lake
    SELECT *
    FROM requests
    WHERE total_tokens > 0 AND request_time IS NOT NULL
      AND /*@roots*/ true /*@end*/
),
keyed AS (
    -- integer keys keep the window's sort cheap: a stream is keyed by the 64-bit hash of
    -- (session_id, parent_session_id) (two streams colliding, ~1e-8 for a million streams, would
    -- merge) and prompt ids are compared by hash; a request without a session stands alone
    SELECT *,
        CASE WHEN session_id IS NULL THEN hash(event_id) ELSE hash(session_id, parent_session_id) END AS stream_key,
        CASE WHEN coalesce(parent_session_id, session_id) IS NULL THEN hash(event_id)
             ELSE hash(coalesce(parent_session_id, session_id)) END AS root_key,
        parent_session_id IS NULL AS is_main,
        epoch_us(request_time) AS t_start_us,
        epoch_us(recorded_time) AS t_end_us,
        CASE WHEN prompt_id IS NOT NULL THEN hash(prompt_id) END AS prompt_key
    FROM sel
),
stream AS (
    -- one row per request in stream order; a sub-agent (parent_session_id set) is its own stream;
    -- (started_at, seq) is unique within a stream in practice: seq is the source order
    SELECT
        coalesce(parent_session_id, session_id) AS root_session_id, root_key, is_main,
        session_id, parent_session_id, agent, model, user_id, source, prompt_id, prompt_key,
        request_time AS t_start,
        recorded_time AS t_end,
        t_start_us, t_end_us,
        context_tokens,
        coalesce(cold_input_tokens, 0) AS cold_input_tokens,
        coalesce(cache_read_tokens, 0) AS cache_read_tokens,
        coalesce(cache_write_tokens, 0) AS cache_write_tokens,
        coalesce(output_tokens, 0) AS output_tokens,
        agent_version, cache_write_5m_tokens, cache_write_1h_tokens,
        event_id,  -- what --where and --by on an attribution join on (traceflow.store.filters, groups)
        row_number() OVER w AS position,
        -- prev_end_us: when every earlier request of the stream had ended (the latest of their ends:
        -- with overlapping requests the previous row may end before an earlier one); NULL for the first
        max(t_end_us) OVER earlier AS prev_end_us,
        -- next_end_us: when a later request of the stream has first ended (the next request's end,
        -- unless a request after it ended sooner); NULL for the stream's last request
        min(t_end_us) OVER later AS next_end_us,
        lag(prompt_key) OVER w AS prev_prompt_key,
        lag(context_tokens) OVER w AS prev_context_tokens,
        lag(coalesce(output_tokens, 0)) OVER w AS prev_output_tokens,
        -- what a request's cache misses are judged by (misses.sql): the previous request's model and
        -- its cache writes by TTL (NULL where the source has no 5m/1h split)
        lag(model) OVER w AS prev_model,
        lag(cache_write_5m_tokens) OVER w AS prev_cache_write_5m_tokens,
        lag(cache_write_1h_tokens) OVER w AS prev_cache_write_1h_tokens,
        -- the TTL of the stream's last write before this request (3600 when most of that request's
        -- write tokens were 1-hour writes, else 300), carried across requests that wrote nothing;
        -- NULL when nothing of the stream wrote yet (misses.sql's TTL in force: 300 then)
        last_value(CASE WHEN coalesce(cache_write_tokens, 0) > 0
                        THEN CASE WHEN coalesce(cache_write_1h_tokens, 0) > coalesce(cache_write_5m_tokens, 0)
                                  THEN 3600 ELSE 300 END END IGNORE NULLS) OVER earlier AS prev_write_ttl_s,
        -- the cache read of the stream's first request
        first_value(coalesce(cache_read_tokens, 0)) OVER w AS first_read_tokens
    FROM keyed
    WINDOW w AS (PARTITION BY stream_key ORDER BY t_start_us, seq),
           earlier AS (PARTITION BY stream_key ORDER BY t_start_us, seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
           later AS (PARTITION BY stream_key ORDER BY t_start_us, seq ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)
),
steps AS (
    -- gap_s: idle seconds since the earlier requests of the stream had all ended (NULL for its first)
    -- kind: agent (same prompt_id), human (new prompt_id), unknown (no prompt ids)
    -- prefix_tokens: the cached prefix this request could reuse: the previous request's context plus
    -- its output, at most this request's context (a compaction keeps less)
    SELECT *,
        CASE WHEN position > 1 THEN greatest(t_start_us - prev_end_us, 0) / 1e6 END AS gap_s,
        CASE WHEN position = 1 THEN NULL
             WHEN prompt_key IS NULL AND prev_prompt_key IS NULL THEN 'unknown'
             WHEN prompt_key = prev_prompt_key THEN 'agent'
             ELSE 'human' END AS kind,
        CASE WHEN position = 1 THEN 0
             ELSE least(prev_context_tokens + prev_output_tokens, context_tokens) END AS prefix_tokens,
        -- gap_bin: the gap's histogram bin, i such that edge[i] <= gap_s < edge[i + 1] for the edges
        -- (seconds) 0, 0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400,
        -- 28800, 86400 (the last bin is open-ended); NULL for a stream's first request
        CASE WHEN position = 1 THEN NULL
             WHEN greatest(t_start_us - prev_end_us, 0) < 100000 THEN 0
             WHEN greatest(t_start_us - prev_end_us, 0) < 500000 THEN 1
             WHEN greatest(t_start_us - prev_end_us, 0) < 1000000 THEN 2
             WHEN greatest(t_start_us - prev_end_us, 0) < 2000000 THEN 3
             WHEN greatest(t_start_us - prev_end_us, 0) < 5000000 THEN 4
             WHEN greatest(t_start_us - prev_end_us, 0) < 10000000 THEN 5
             WHEN greatest(t_start_us - prev_end_us, 0) < 20000000 THEN 6
             WHEN greatest(t_start_us - prev_end_us, 0) < 30000000 THEN 7
             WHEN greatest(t_start_us - prev_end_us, 0) < 60000000 THEN 8
             WHEN greatest(t_start_us - prev_end_us, 0) < 120000000 THEN 9
             WHEN greatest(t_start_us - prev_end_us, 0) < 300000000 THEN 10
             WHEN greatest(t_start_us - prev_end_us, 0) < 600000000 THEN 11
             WHEN greatest(t_start_us - prev_end_us, 0) < 1200000000 THEN 12
             WHEN greatest(t_start_us - prev_end_us, 0) < 1800000000 THEN 13
             WHEN greatest(t_start_us - prev_end_us, 0) < 3600000000 THEN 14
             WHEN greatest(t_start_us - prev_end_us, 0) < 7200000000 THEN 15
             WHEN greatest(t_start_us - prev_end_us, 0) < 14400000000 THEN 16
             WHEN greatest(t_start_us - prev_end_us, 0) < 28800000000 THEN 17
             WHEN greatest(t_start_us - prev_end_us, 0) < 86400000000 THEN 18
             ELSE 19 END AS gap_bin
    FROM stream
)
-- the selection, after the window: it narrows the rows, not what each row was computed from
SELECT * FROM steps
WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
  AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/;
