-- sessions: one row per session (sub-agents folded into the session that spawned them): turns,
-- requests, duration, context at start and end, growth per turn, compactions, sub-agents, resumes.
-- Streams and gaps as in gaps.sql; a request without a session_id is a session of its own. Context figures, turns, growth, drops and resumes come from the
-- main stream (parent_session_id NULL). turns: the main stream's prompt_id changes (each request is a
-- turn where prompt ids are unknown). growth_tokens: the sum of context increases between consecutive
-- main-stream requests; growth_per_turn = growth_tokens / turns. context_drops: requests whose
-- context fell by more than $compaction_drop of the previous one; compaction_events: 'compaction'
-- events of the session within its time span; compactions: the larger of the two. resumes: requests
-- after an idle gap of at least $resume_after_s; resume_reload_tokens: their cached prefix (as in
-- ttl.sql), which had to be reloaded; resume_cache_write_tokens: what they reported writing.
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $resume_after_s DOUBLE = 900     idle seconds after which a request is a resume
--          $compaction_drop DOUBLE = 0.5    context drop (share of the previous context) that is a compaction
-- returns: root_session_id, agent, model, user_id, source, started_at, ended_at, duration_s, requests,
--          turns, subagents, subagent_requests, context_start, context_end, context_max,
--          growth_tokens, growth_per_turn, context_drops, compaction_events, compactions, resumes,
--          resume_reload_tokens, resume_cache_write_tokens, cold_input_tokens, cache_read_tokens,
--          cache_write_tokens, output_tokens, reuse_ratio

-- >>> stream CTEs (identical in every per-stream query; tests/test_queries.py checks it)
WITH sel AS (
    -- the selection; requests without tokens (failed calls) neither read nor write a cache
    SELECT *
    FROM requests
    WHERE total_tokens > 0 AND coalesce(started_at, ended_at) IS NOT NULL
      AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR coalesce(started_at, ended_at) >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR coalesce(started_at, ended_at) < CAST($until AS TIMESTAMPTZ)) /*@end*/
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
        epoch_us(coalesce(started_at, ended_at)) AS t_start_us,
        epoch_us(coalesce(ended_at, started_at)) AS t_end_us,
        CASE WHEN prompt_id IS NOT NULL THEN hash(prompt_id) END AS prompt_key
    FROM sel
),
stream AS (
    -- one row per request in stream order; a sub-agent (parent_session_id set) is its own stream;
    -- (started_at, seq) is unique within a stream in practice: seq is the source order
    SELECT
        coalesce(parent_session_id, session_id) AS root_session_id, root_key, is_main,
        session_id, parent_session_id, agent, model, user_id, source, prompt_id, prompt_key,
        coalesce(started_at, ended_at) AS t_start,
        coalesce(ended_at, started_at) AS t_end,
        t_start_us, t_end_us,
        context_tokens,
        coalesce(cold_input_tokens, 0) AS cold_input_tokens,
        coalesce(cache_read_tokens, 0) AS cache_read_tokens,
        coalesce(cache_write_tokens, 0) AS cache_write_tokens,
        coalesce(output_tokens, 0) AS output_tokens,
        row_number() OVER w AS position,
        lag(t_end_us) OVER w AS prev_end_us,
        lead(t_end_us) OVER w AS next_end_us,
        lag(prompt_key) OVER w AS prev_prompt_key,
        lag(context_tokens) OVER w AS prev_context_tokens,
        lag(coalesce(output_tokens, 0)) OVER w AS prev_output_tokens,
        -- what a request's cache misses are judged by (misses.sql): the previous request's model and
        -- its cache writes by TTL (NULL where the source has no 5m/1h split)
        lag(model) OVER w AS prev_model,
        lag(cache_write_5m_tokens) OVER w AS prev_cache_write_5m_tokens,
        lag(cache_write_1h_tokens) OVER w AS prev_cache_write_1h_tokens
    FROM keyed
    WINDOW w AS (PARTITION BY stream_key ORDER BY t_start_us, seq)
),
steps AS (
    -- gap_s: idle seconds since the previous request of the stream ended (NULL for its first request)
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
),
-- <<< stream CTEs
flagged AS (
    -- only integers pass the window: the session's names and token sums come from a plain aggregate
    SELECT root_key, is_main, position, t_start_us, t_end_us, next_end_us, context_tokens,
        prefix_tokens, cache_write_tokens,
        CASE WHEN position = 1 OR prompt_key IS NULL OR prev_prompt_key IS NULL OR prompt_key <> prev_prompt_key
             THEN 1 ELSE 0 END AS new_turn,
        CASE WHEN position > 1 AND context_tokens < (1 - CAST($compaction_drop AS DOUBLE)) * prev_context_tokens
             THEN 1 ELSE 0 END AS context_drop,
        CASE WHEN position > 1 AND gap_s >= CAST($resume_after_s AS DOUBLE) THEN 1 ELSE 0 END AS resumed,
        CASE WHEN position > 1 THEN greatest(context_tokens - prev_context_tokens, 0) ELSE 0 END AS growth
    FROM steps
),
per_stream AS (
    SELECT root_key,
        sum(CASE WHEN is_main THEN new_turn ELSE 0 END)::BIGINT AS turns,
        sum(CASE WHEN NOT is_main AND position = 1 THEN 1 ELSE 0 END)::BIGINT AS subagents,
        sum(CASE WHEN NOT is_main THEN 1 ELSE 0 END)::BIGINT AS subagent_requests,
        max(CASE WHEN is_main AND position = 1 THEN context_tokens END) AS context_start,
        max(CASE WHEN is_main AND next_end_us IS NULL THEN context_tokens END) AS context_end,
        max(CASE WHEN is_main THEN context_tokens END) AS context_max,
        sum(CASE WHEN is_main THEN growth ELSE 0 END)::BIGINT AS growth_tokens,
        sum(CASE WHEN is_main THEN context_drop ELSE 0 END)::BIGINT AS context_drops,
        sum(CASE WHEN is_main THEN resumed ELSE 0 END)::BIGINT AS resumes,
        sum(CASE WHEN is_main AND resumed = 1 THEN prefix_tokens ELSE 0 END)::BIGINT AS resume_reload_tokens,
        sum(CASE WHEN is_main AND resumed = 1 THEN cache_write_tokens ELSE 0 END)::BIGINT AS resume_cache_write_tokens
    FROM flagged
    GROUP BY root_key
),
per_session AS (
    -- the same requests as sel, aggregated without the window (a second scan, not a second
    -- reference to sel, which DuckDB would materialise), grouped by the integer root_key alone (a
    -- string key in the GROUP BY costs 4x). With steps stored by compaction, traceflow runs the same
    -- aggregate over request_steps instead (sql.STORED_SESSION_ROWS).
    -- >>> session rows
    SELECT CASE WHEN coalesce(parent_session_id, session_id) IS NULL THEN hash(event_id)
                ELSE hash(coalesce(parent_session_id, session_id)) END AS root_key,
        any_value(coalesce(parent_session_id, session_id)) AS root_session_id,
        max(agent) AS agent, max(model) AS model, max(user_id) AS user_id, max(source) AS source,
        min(coalesce(started_at, ended_at)) AS started_at, max(coalesce(ended_at, started_at)) AS ended_at,
        (max(epoch_us(coalesce(ended_at, started_at))) - min(epoch_us(coalesce(started_at, ended_at)))) / 1e6
            AS duration_s,
        count(*)::BIGINT AS requests,
        sum(coalesce(cold_input_tokens, 0))::BIGINT AS cold_input_tokens,
        sum(coalesce(cache_read_tokens, 0))::BIGINT AS cache_read_tokens,
        sum(coalesce(cache_write_tokens, 0))::BIGINT AS cache_write_tokens,
        sum(coalesce(output_tokens, 0))::BIGINT AS output_tokens
    FROM requests
    WHERE total_tokens > 0 AND coalesce(started_at, ended_at) IS NOT NULL
      AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR coalesce(started_at, ended_at) >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR coalesce(started_at, ended_at) < CAST($until AS TIMESTAMPTZ)) /*@end*/
    GROUP BY 1
    -- <<< session rows
),
compaction_events AS (
    SELECT p.root_key, count(*)::BIGINT AS compaction_events
    FROM per_session p
    JOIN events e
      ON e.name = 'compaction'
     AND coalesce(e.parent_session_id, e.session_id) = p.root_session_id
     AND e.timestamp >= p.started_at AND e.timestamp <= p.ended_at
    GROUP BY p.root_key
)
SELECT p.root_session_id, p.agent, p.model, p.user_id, p.source, p.started_at, p.ended_at, p.duration_s,
       p.requests, w.turns, w.subagents, w.subagent_requests,
       w.context_start, w.context_end, w.context_max, w.growth_tokens,
       w.growth_tokens / nullif(w.turns, 0)::DOUBLE AS growth_per_turn,
       w.context_drops,
       coalesce(c.compaction_events, 0)::BIGINT AS compaction_events,
       greatest(w.context_drops, coalesce(c.compaction_events, 0))::BIGINT AS compactions,
       w.resumes, w.resume_reload_tokens, w.resume_cache_write_tokens,
       p.cold_input_tokens, p.cache_read_tokens, p.cache_write_tokens, p.output_tokens,
       p.cache_read_tokens
         / nullif(p.cold_input_tokens + p.cache_read_tokens + p.cache_write_tokens, 0)::DOUBLE AS reuse_ratio
FROM per_session p
JOIN per_stream w ON w.root_key = p.root_key
LEFT JOIN compaction_events c ON c.root_key = p.root_key
/*@order*/ ORDER BY p.started_at, p.root_session_id /*@end*/;
