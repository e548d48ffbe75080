-- misses: every request classed as a cache hit or a miss, with one cause for each miss.
-- Streams, order and gaps are the request_steps view's (queries/steps.sql; stored by `traceflow
-- compact`): the window runs over the whole lake, so the first request of the selection still has
-- its previous request. reusable_tokens is the smaller of the previous request's prompt (cold + read
-- + write) and this request's. A request misses when it is the first of its stream, or when its
-- cache read falls more than $miss_tokens below reusable_tokens; missed_tokens = reusable_tokens -
-- cache read (0 for a hit and for a stream's first request, which has nothing of its own to reuse).
-- ttl_in_force_s: the TTL of the stream's last write before this request (3600 when most of that
-- request's write tokens were 1-hour writes, else 300), carried forward across requests that wrote
-- nothing (a request that only read does not change it); 300 when nothing of the stream wrote yet.
-- restart: resume / continue (OTLP: a claude_code.session.count point with that start_type; the
-- restart time is the point's start_time, the process start) or restart (a Claude Code transcript:
-- a `session_restart` event, written by the importer where a cost-state line, which the client
-- writes as its process exits, is followed by a new prompt) when this is the first main-stream
-- request of the session after the agent process restarted: the restart fell after the previous
-- request's end and no later than this request's start. A `--continue` point carries a transient
-- session id (and a point may carry none: OTEL_METRICS_INCLUDE_SESSION_ID=false): such a point is
-- linked by its export, the other points that its process sent with it (the same source, user and
-- collection time: the continued session's token, cost and activity points): to the one session
-- they name; an export that names no session, or more than one, leaves the point unlinked (never
-- the user's next request in whichever session).
-- first_read_tokens: the cache read of the stream's first request.
-- static_prefix_tokens: the static prefix (system prompt and tool definitions) the stream's trace
-- records, where it records one (kv-cache-tester: tool_tokens + system_tokens of the trace's
-- `trace_info` event for the main stream, of its `subagent` event for a sub-agent; 0 is no record),
-- else first_read_tokens.
-- cause, first match wins: first_request (first of its stream; a sub-agent is its own stream),
-- model_switch (another model than the previous request's), compaction (a compaction event of the
-- stream between the previous request's end and this request's start, or the context fell by more
-- than $compaction_drop of the previous one), ttl_expired (the idle gap exceeds ttl_in_force_s),
-- restart (restart is set: the agent process restarted), prefix_break (the cache read is above zero and at most
-- static_prefix_tokens + $prefix_tokens: the static prefix hit, the conversation after it did not),
-- unexplained. cause is NULL for a hit. event_id names the request.
-- Reads request_steps, the window of steps.sql (over the whole lake); in a bare DuckDB create it
-- first as steps.sql says, then run this file with its other parameters.
-- traceflow narrows the selection in the `filter` block (not `selection`, which would narrow the
-- window too), and empties the `order` block where it only aggregates the rows (sorting them costs
-- about a quarter of the query). DuckDB dialect: epoch_us.
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $miss_tokens BIGINT = 1024       how far below the reusable prefix a cache read is a miss
--          $compaction_drop DOUBLE = 0.5    a context drop (share of the previous) that is a compaction
--          $prefix_tokens BIGINT = 1024     how far above the static prefix a prefix break reads
-- returns: root_session_id, session_id, parent_session_id, agent, agent_version, model, prev_model,
--          user_id, source, prompt_id, started_at, ended_at, position, gap_s, context_tokens,
--          prev_context_tokens, cold_input_tokens, cache_read_tokens, cache_write_tokens,
--          cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, first_read_tokens,
--          static_prefix_tokens, reusable_tokens, missed_tokens, ttl_in_force_s, compaction_event,
--          restart, miss, cause, event_id
WITH carried AS /*@materialized*/ MATERIALIZED /*@end*/ (
    -- the stream's last write before each request (prev_write_ttl_s) and its first cache read
    -- (first_read_tokens) come with the window (steps.sql), computed in its one sort of the streams;
    -- MATERIALIZED: two parts below read it (the restarts and the requests), one window for both
    -- (traceflow empties the block where request_steps is a table: each part then reads only its rows)
    SELECT * FROM request_steps
),
marks AS (
    -- each agent-process restart within a session: (session, user, time, start_type); a point's
    -- session is its own for a `resume` that names one, else the one session the other points of
    -- its export name (NULL: unlinked, dropped below)
    SELECT DISTINCT session_id, user_id, t_us, start_type FROM (
        /*@restart_points*/ SELECT CASE WHEN start_type = 'resume' AND own_session_id IS NOT NULL
                                        THEN own_session_id
                                        WHEN exported_sessions = 1 THEN exported_session_id END AS session_id,
               user_id, t_us, start_type
        FROM (
            SELECT p.session_id AS own_session_id, p.user_id, p.t_us, p.start_type,
                   min(o.session_id) AS exported_session_id,
                   count(DISTINCT o.session_id) AS exported_sessions
            FROM (SELECT DISTINCT session_id, user_id, source, time, epoch_us(start_time) AS t_us,
                         json_extract_string(attributes, '$.start_type') AS start_type
                  FROM metric_points
                  WHERE name = 'claude_code.session.count' AND start_time IS NOT NULL
                    AND json_extract_string(attributes, '$.start_type') IN ('resume', 'continue')
                    AND coalesce(delta, value) > 0) AS p
            LEFT JOIN metric_points o
              ON o.time = p.time AND o.source = p.source AND o.user_id IS NOT DISTINCT FROM p.user_id
             AND o.name <> 'claude_code.session.count' AND o.session_id IS NOT NULL
            GROUP BY p.session_id, p.user_id, p.source, p.time, p.t_us, p.start_type
        ) AS linked /*@end*/
        UNION ALL
        SELECT session_id, user_id, epoch_us(timestamp) AS t_us, 'restart' AS start_type
        FROM events WHERE name = 'session_restart' AND session_id IS NOT NULL AND timestamp IS NOT NULL
    ) AS m
    WHERE session_id IS NOT NULL
),
marked AS (
    -- the first main-stream request of the mark's session after each restart. Two requests of one
    -- session starting the same microsecond both rank first (one row each below).
    SELECT r.session_id, r.position, m.start_type
    FROM carried r JOIN marks m ON m.session_id = r.session_id
    WHERE r.parent_session_id IS NULL AND r.position > 1
      AND m.t_us > r.prev_end_us AND m.t_us <= r.t_start_us
    QUALIFY rank() OVER (PARTITION BY m.session_id, m.user_id, m.t_us, m.start_type
                         ORDER BY r.t_start_us) = 1
),
restarted AS (
    -- one row per request; an OTLP start_type wins over a transcript's `restart`
    SELECT session_id, position,
           coalesce(max(CASE WHEN start_type <> 'restart' THEN start_type END), 'restart') AS restart
    FROM marked GROUP BY session_id, position
),
recorded AS (
    -- the static prefix a trace records per stream (the main stream's `trace_info`, a sub-agent's
    -- `subagent` event); a record of 0 tokens is none (traceflow's own export writes 0)
    SELECT session_id, parent_session_id,
           nullif(max(coalesce(CAST(json_extract_string(attributes, '$.tool_tokens') AS BIGINT), 0)
                      + coalesce(CAST(json_extract_string(attributes, '$.system_tokens') AS BIGINT), 0)), 0)
               AS recorded_prefix_tokens
    FROM events
    WHERE name IN ('trace_info', 'subagent') AND session_id IS NOT NULL
    GROUP BY session_id, parent_session_id
),
sel AS (
    SELECT *,
        CASE WHEN position = 1 THEN 0 ELSE least(prev_context_tokens, context_tokens) END AS reusable_tokens,
        coalesce(prev_write_ttl_s, 300) AS ttl_in_force_s
    FROM carried
    WHERE /*@filter*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
),
judged AS (
    SELECT *,
        position = 1 OR cache_read_tokens < reusable_tokens - CAST($miss_tokens AS BIGINT) AS miss
    FROM sel
),
compacted AS (
    -- the misses after a compaction event of their stream (only misses are looked up)
    SELECT j.session_id, j.parent_session_id, j.position
    FROM judged j
    SEMI JOIN (SELECT session_id, parent_session_id, epoch_us(timestamp) AS t_us
               FROM events WHERE name = 'compaction' AND session_id IS NOT NULL) e
      ON e.session_id = j.session_id
     AND e.parent_session_id IS NOT DISTINCT FROM j.parent_session_id
     AND e.t_us >= j.prev_end_us AND e.t_us <= j.t_start_us
    WHERE j.miss AND j.position > 1
)
SELECT j.root_session_id, j.session_id, j.parent_session_id, j.agent, j.agent_version, j.model,
       j.prev_model, j.user_id, j.source, j.prompt_id, j.t_start AS started_at, j.t_end AS ended_at,
       j.position, j.gap_s, j.context_tokens, j.prev_context_tokens, j.cold_input_tokens,
       j.cache_read_tokens, j.cache_write_tokens, j.cache_write_5m_tokens, j.cache_write_1h_tokens,
       j.output_tokens, j.first_read_tokens,
       coalesce(p.recorded_prefix_tokens, j.first_read_tokens) AS static_prefix_tokens, j.reusable_tokens,
       CASE WHEN j.miss THEN greatest(j.reusable_tokens - j.cache_read_tokens, 0) ELSE 0 END::BIGINT
           AS missed_tokens,
       j.ttl_in_force_s,
       c.position IS NOT NULL AS compaction_event,
       x.restart,
       j.miss,
       CASE WHEN NOT j.miss THEN NULL
            WHEN j.position = 1 THEN 'first_request'
            WHEN j.model IS DISTINCT FROM j.prev_model THEN 'model_switch'
            WHEN c.position IS NOT NULL
              OR j.context_tokens < (1 - CAST($compaction_drop AS DOUBLE)) * j.prev_context_tokens
              THEN 'compaction'
            WHEN j.gap_s > j.ttl_in_force_s THEN 'ttl_expired'
            WHEN x.restart IS NOT NULL THEN 'restart'
            WHEN j.cache_read_tokens > 0
             AND j.cache_read_tokens <= coalesce(p.recorded_prefix_tokens, j.first_read_tokens)
                                        + CAST($prefix_tokens AS BIGINT)
              THEN 'prefix_break'
            ELSE 'unexplained' END AS cause,
       j.event_id
FROM judged j
LEFT JOIN compacted c
  ON c.session_id = j.session_id AND c.parent_session_id IS NOT DISTINCT FROM j.parent_session_id
 AND c.position = j.position
LEFT JOIN recorded p
  ON p.session_id = j.session_id AND p.parent_session_id IS NOT DISTINCT FROM j.parent_session_id
LEFT JOIN restarted x
  ON j.parent_session_id IS NULL AND x.session_id = j.session_id AND x.position = j.position
/*@order*/ ORDER BY j.t_start, j.root_session_id, j.session_id, j.position /*@end*/;
