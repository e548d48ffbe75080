-- sessions: one row per session (sub-agents folded into the session that spawned them): turns,
-- requests, duration, context at start and end, growth per turn, compactions, sub-agents, idle returns.
-- Streams and gaps as in gaps.sql; a request without a session_id is not a session and is left out
-- (sessionless traces such as Mooncake have no sessions). A session's row sums its selected requests
-- (those from $since to $until), each judged against its stream's previous request in the whole lake,
-- so the per-request counts (requests, turns, sub-agents, growth, drops, idle returns, tokens) add up over
-- disjoint windows. Context figures, turns, growth, drops and idle returns come from the main stream
-- (parent_session_id NULL). turns: requests that open a turn: the stream's first request or a new
-- prompt_id (each request is a turn where prompt ids are unknown). subagents: sub-agent streams whose
-- first request is selected. context_start, context_end: the context of the first and last selected
-- main-stream request (NULL without one). growth_tokens: the sum of context increases over the
-- previous main-stream request; growth_per_turn = growth_tokens / turns (NULL without turns).
-- context_drops: requests whose context fell by more than $compaction_drop of the previous one;
-- compaction_events: 'compaction' events of the session within the time span of its selected
-- requests; compactions: the larger of the two. idle_returns: requests after an idle gap of at least
-- $idle_after_s; idle_return_reload_tokens: their cached prefix (as in ttl.sql), which had to be
-- reloaded; idle_return_cache_write_tokens: what they reported writing. agent_version: the client version
-- of the session's first selected request. write_amplification: cache write tokens / cache read
-- tokens (NULL when nothing was read).
-- `sessions --by project|host|attr:NAME` replaces the blocks rows, keys and key_columns: each request
-- of request_steps with its own value, a session split into one row per value its requests carry.
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's previous one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $idle_after_s DOUBLE = 900     idle seconds after which a request is an idle return
--          $compaction_drop DOUBLE = 0.5    context drop (share of the previous context) that is a compaction
-- returns: root_session_id, agent, model, user_id, source, started_at, ended_at, duration_s, requests,
--          turns, subagents, subagent_requests, context_start, context_end, context_max,
--          growth_tokens, growth_per_turn, context_drops, compaction_events, compactions, idle_returns,
--          idle_return_reload_tokens, idle_return_cache_write_tokens, cold_input_tokens, cache_read_tokens,
--          cache_write_tokens, output_tokens, reuse_ratio, agent_version, write_amplification

WITH flagged AS (
    -- only integers pass the window: the session's names and token sums come from a plain aggregate
    SELECT root_key, is_main, position, t_start_us, t_end_us, context_tokens,
        prefix_tokens, cache_write_tokens,
        CASE WHEN position = 1 OR prompt_key IS NULL OR prev_prompt_key IS NULL OR prompt_key <> prev_prompt_key
             THEN 1 ELSE 0 END AS new_turn,
        CASE WHEN position > 1 AND context_tokens < (1 - CAST($compaction_drop AS DOUBLE)) * prev_context_tokens
             THEN 1 ELSE 0 END AS context_drop,
        CASE WHEN position > 1 AND gap_s >= CAST($idle_after_s AS DOUBLE) THEN 1 ELSE 0 END AS idle_return,
        CASE WHEN position > 1 THEN greatest(context_tokens - prev_context_tokens, 0) ELSE 0 END AS growth
    FROM /*@rows*/ request_steps /*@end*/
    WHERE root_session_id IS NOT NULL
      AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
),
per_stream AS (
    SELECT root_key,
        sum(CASE WHEN is_main THEN new_turn ELSE 0 END)::BIGINT AS turns,
        sum(CASE WHEN NOT is_main AND position = 1 THEN 1 ELSE 0 END)::BIGINT AS subagents,
        sum(CASE WHEN NOT is_main THEN 1 ELSE 0 END)::BIGINT AS subagent_requests,
        min_by(context_tokens, position) FILTER (WHERE is_main) AS context_start,
        max_by(context_tokens, position) FILTER (WHERE is_main) AS context_end,
        max(CASE WHEN is_main THEN context_tokens END) AS context_max,
        sum(CASE WHEN is_main THEN growth ELSE 0 END)::BIGINT AS growth_tokens,
        sum(CASE WHEN is_main THEN context_drop ELSE 0 END)::BIGINT AS context_drops,
        sum(CASE WHEN is_main THEN idle_return ELSE 0 END)::BIGINT AS idle_returns,
        sum(CASE WHEN is_main AND idle_return = 1 THEN prefix_tokens ELSE 0 END)::BIGINT AS idle_return_reload_tokens,
        sum(CASE WHEN is_main AND idle_return = 1 THEN cache_write_tokens ELSE 0 END)::BIGINT AS idle_return_cache_write_tokens
    FROM flagged
    GROUP BY root_key
),
per_session AS (
    -- the session's names, times and token sums: a second read of request_steps that uses none of
    -- the window's columns, so DuckDB skips the window there (it stays a plain aggregate, grouped by
    -- the integer root_key alone: a string key in the GROUP BY costs 4x)
    SELECT root_key, any_value(root_session_id) AS root_session_id, /*@keys*/ /*@end*/
        max(agent) AS agent, max(model) AS model, max(user_id) AS user_id, max(source) AS source,
        min(t_start) AS started_at, max(t_end) AS ended_at,
        (max(t_end_us) - min(t_start_us)) / 1e6 AS duration_s,
        count(*)::BIGINT AS requests,
        sum(cold_input_tokens)::BIGINT AS cold_input_tokens,
        sum(cache_read_tokens)::BIGINT AS cache_read_tokens,
        sum(cache_write_tokens)::BIGINT AS cache_write_tokens,
        sum(output_tokens)::BIGINT AS output_tokens,
        min_by(agent_version, t_start_us) AS agent_version
    FROM /*@rows*/ request_steps /*@end*/
    WHERE root_session_id IS NOT NULL
      AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
    GROUP BY root_key
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
SELECT p.root_session_id, /*@key_columns*/ /*@end*/
       p.agent, p.model, p.user_id, p.source, p.started_at, p.ended_at, p.duration_s,
       p.requests, w.turns, w.subagents, w.subagent_requests,
       w.context_start, w.context_end, w.context_max, w.growth_tokens,
       w.growth_tokens / nullif(w.turns, 0)::DOUBLE AS growth_per_turn,
       w.context_drops,
       coalesce(c.compaction_events, 0)::BIGINT AS compaction_events,
       greatest(w.context_drops, coalesce(c.compaction_events, 0))::BIGINT AS compactions,
       w.idle_returns, w.idle_return_reload_tokens, w.idle_return_cache_write_tokens,
       p.cold_input_tokens, p.cache_read_tokens, p.cache_write_tokens, p.output_tokens,
       reuse_ratio(p.cache_read_tokens, p.cold_input_tokens + p.cache_read_tokens + p.cache_write_tokens) AS reuse_ratio,
       p.agent_version,
       p.cache_write_tokens / nullif(p.cache_read_tokens, 0)::DOUBLE AS write_amplification
FROM per_session p
JOIN per_stream w ON w.root_key = p.root_key
LEFT JOIN compaction_events c ON c.root_key = p.root_key
/*@order*/ ORDER BY p.started_at, p.root_session_id /*@end*/;
