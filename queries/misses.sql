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
-- session id (and a point may carry none: OTEL_METRICS_INCLUDE_SESSION_ID=false): such a point
-- marks the first main-stream request of the same user after it, since its session is not named.
-- first_read_tokens: the cache read of the stream's first request (its static prefix).
-- cause, first match wins: first_request (first of its stream; a sub-agent is its own stream),
-- model_switch (another model than the previous request's), compaction (a compaction event of the
-- stream between the previous request's end and this request's start, or the context fell by more
-- than $compaction_drop of the previous one), ttl_expired (the idle gap exceeds ttl_in_force_s),
-- restart (restart is set: the agent process restarted), prefix_break (the cache read is above zero and at most
-- first_read_tokens + $prefix_tokens: the static prefix hit, the conversation after it did not),
-- unexplained. cause is NULL for a hit.
-- Reads request_steps, the window of steps.sql (over the whole lake); in a bare DuckDB create it
-- first as steps.sql says, then run this file with its other parameters.
-- traceflow narrows the selection in the `filter` block (not `selection`, which would narrow the
-- window too). DuckDB dialect: epoch_us, hash.
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $miss_tokens BIGINT = 1024       how far below the reusable prefix a cache read is a miss
--          $compaction_drop DOUBLE = 0.5    a context drop (share of the previous) that is a compaction
--          $prefix_tokens BIGINT = 1024     how far above the first request's read a prefix break reads
-- returns: root_session_id, session_id, parent_session_id, agent, agent_version, model, prev_model,
--          user_id, source, prompt_id, started_at, ended_at, position, gap_s, context_tokens,
--          prev_context_tokens, cold_input_tokens, cache_read_tokens, cache_write_tokens,
--          cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, first_read_tokens,
--          reusable_tokens, missed_tokens, ttl_in_force_s, compaction_event, restart, miss, cause
WITH carried AS (
    -- one window over each stream's earlier requests: its last write, as (position) * 2 + (1 if
    -- 1-hour), whose running maximum carries it across the requests that wrote nothing; and the
    -- stream's first cache read. Streams are keyed by the 64-bit hash of (session_id,
    -- parent_session_id), as in steps.sql.
    SELECT *,
        -- (a stream's first request has no earlier one: NULL; requests without a session share a
        -- window partition here but are each a stream of their own)
        CASE WHEN position > 1 THEN
            max(CASE WHEN cache_write_tokens > 0
                     THEN position * 2
                          + CASE WHEN coalesce(cache_write_1h_tokens, 0) > coalesce(cache_write_5m_tokens, 0)
                                 THEN 1 ELSE 0 END END) OVER earlier END AS last_write_code,
        CASE WHEN position = 1 THEN cache_read_tokens
             ELSE first_value(cache_read_tokens) OVER earlier END AS first_read_tokens
    FROM request_steps
    WINDOW earlier AS (PARTITION BY hash(session_id, parent_session_id) ORDER BY position
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
marks AS (
    -- each agent-process restart within a session: (session, user, time, start_type)
    SELECT DISTINCT session_id, user_id, t_us, start_type FROM (
        /*@restart_points*/ SELECT session_id, user_id, epoch_us(start_time) AS t_us,
               json_extract_string(attributes, '$.start_type') AS start_type
        FROM metric_points
        WHERE name = 'claude_code.session.count' AND start_time IS NOT NULL
          AND json_extract_string(attributes, '$.start_type') IN ('resume', 'continue')
          AND coalesce(delta, value) > 0 /*@end*/
        UNION ALL
        SELECT session_id, user_id, epoch_us(timestamp) AS t_us, 'restart' AS start_type
        FROM events WHERE name = 'session_restart' AND session_id IS NOT NULL AND timestamp IS NOT NULL
    ) AS m
),
marked AS (
    -- the first main-stream request after each restart: of the mark's session, or (a --continue
    -- mark, whose session id is transient, or a point without a session id) of the same user; two
    -- equi-joins, not one OR-join, so that neither compares every request with every mark. Two
    -- requests of one session starting the same microsecond both rank first (one row each below).
    SELECT session_id, position, start_type FROM (
        SELECT r.session_id, r.position, r.t_start_us, m.session_id AS m_session, m.user_id AS m_user,
               m.t_us, m.start_type, 0 AS pref
        FROM carried r JOIN marks m ON m.session_id = r.session_id
        WHERE r.parent_session_id IS NULL AND r.position > 1
          AND m.t_us > r.prev_end_us AND m.t_us <= r.t_start_us
        UNION ALL
        SELECT r.session_id, r.position, r.t_start_us, m.session_id AS m_session, m.user_id AS m_user,
               m.t_us, m.start_type, 1 AS pref
        FROM carried r JOIN marks m ON m.user_id = r.user_id
        WHERE (m.start_type = 'continue' OR m.session_id IS NULL)
          AND r.parent_session_id IS NULL AND r.position > 1
          AND m.t_us > r.prev_end_us AND m.t_us <= r.t_start_us
    ) AS c
    QUALIFY rank() OVER (PARTITION BY m_session, m_user, t_us, start_type
                         ORDER BY pref, t_start_us, session_id) = 1
),
restarted AS (
    -- one row per request; an OTLP start_type wins over a transcript's `restart`
    SELECT session_id, position,
           coalesce(max(CASE WHEN start_type <> 'restart' THEN start_type END), 'restart') AS restart
    FROM marked GROUP BY session_id, position
),
sel AS (
    SELECT *,
        CASE WHEN position = 1 THEN 0 ELSE least(prev_context_tokens, context_tokens) END AS reusable_tokens,
        CASE WHEN last_write_code % 2 = 1 THEN 3600 ELSE 300 END AS ttl_in_force_s
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
       j.output_tokens, j.first_read_tokens, j.reusable_tokens,
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
             AND j.cache_read_tokens <= j.first_read_tokens + CAST($prefix_tokens AS BIGINT)
              THEN 'prefix_break'
            ELSE 'unexplained' END AS cause
FROM judged j
LEFT JOIN compacted c
  ON c.session_id = j.session_id AND c.parent_session_id IS NOT DISTINCT FROM j.parent_session_id
 AND c.position = j.position
LEFT JOIN restarted x
  ON j.parent_session_id IS NULL AND x.session_id = j.session_id AND x.position = j.position
ORDER BY j.t_start, j.root_session_id, j.session_id, j.position;
