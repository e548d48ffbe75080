-- misses: every request classed as a cache hit or a miss, with one cause for each miss.
-- Streams, order and gaps are the request_steps view's (queries/steps.sql; stored by `traceflow
-- compact`): the window runs over the whole lake, so the first request of the selection still has
-- its previous request. reusable_tokens is the smaller of the previous request's prompt (cold + read
-- + write) and this request's. A request misses when it is the first of its stream, or when its
-- cache read falls more than $miss_tokens below reusable_tokens; missed_tokens = reusable_tokens -
-- cache read (0 for a hit and for a stream's first request, which has nothing of its own to reuse).
-- cause, first match wins: first_request (first of its stream; a sub-agent is its own stream),
-- model_switch (another model than the previous request's), compaction (a compaction event of the
-- stream between the previous request's end and this request's start, or the context fell by more
-- than $compaction_drop of the previous one), ttl_expired (the idle gap exceeds ttl_in_force_s, the
-- TTL of the previous request's cache: 3600 when most of its write tokens were 1-hour writes, else
-- 300), unexplained. cause is NULL for a hit.
-- Reads request_steps, the window of steps.sql (over the whole lake); in a bare DuckDB create it
-- first as steps.sql says, then run this file with its other parameters.
-- traceflow narrows the selection in the `filter` block (not `selection`, which would narrow the
-- window too). DuckDB dialect: epoch_us.
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $miss_tokens BIGINT = 1024       how far below the reusable prefix a cache read is a miss
--          $compaction_drop DOUBLE = 0.5    a context drop (share of the previous) that is a compaction
-- returns: root_session_id, session_id, parent_session_id, agent, model, prev_model, user_id, source,
--          prompt_id, started_at, position, gap_s, context_tokens, prev_context_tokens,
--          cache_read_tokens, cache_write_tokens, reusable_tokens, missed_tokens, ttl_in_force_s,
--          compaction_event, miss, cause
WITH sel AS (
    SELECT *,
        CASE WHEN position = 1 THEN 0 ELSE least(prev_context_tokens, context_tokens) END AS reusable_tokens,
        CASE WHEN coalesce(prev_cache_write_1h_tokens, 0) > coalesce(prev_cache_write_5m_tokens, 0)
             THEN 3600 ELSE 300 END AS ttl_in_force_s
    FROM request_steps
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
SELECT j.root_session_id, j.session_id, j.parent_session_id, j.agent, j.model, j.prev_model, j.user_id,
       j.source, j.prompt_id, j.t_start AS started_at, j.position, j.gap_s, j.context_tokens,
       j.prev_context_tokens, j.cache_read_tokens, j.cache_write_tokens, j.reusable_tokens,
       CASE WHEN j.miss THEN greatest(j.reusable_tokens - j.cache_read_tokens, 0) ELSE 0 END::BIGINT
           AS missed_tokens,
       j.ttl_in_force_s,
       c.position IS NOT NULL AS compaction_event,
       j.miss,
       CASE WHEN NOT j.miss THEN NULL
            WHEN j.position = 1 THEN 'first_request'
            WHEN j.model IS DISTINCT FROM j.prev_model THEN 'model_switch'
            WHEN c.position IS NOT NULL
              OR j.context_tokens < (1 - CAST($compaction_drop AS DOUBLE)) * j.prev_context_tokens
              THEN 'compaction'
            WHEN j.gap_s > j.ttl_in_force_s THEN 'ttl_expired'
            ELSE 'unexplained' END AS cause
FROM judged j
LEFT JOIN compacted c
  ON c.session_id = j.session_id AND c.parent_session_id IS NOT DISTINCT FROM j.parent_session_id
 AND c.position = j.position
ORDER BY j.t_start, j.root_session_id, j.session_id, j.position;
