-- block_misses: every request judged from its prefix block hashes (hash_ids), where it has them.
-- For a trace without sessions (Mooncake, Bailian) the stream of misses.sql does not exist: a request
-- is not "the first of its stream", it shares prefix blocks with whatever request came before it.
-- Each block of a request's hash_ids (compared within its attributes.hash_scope, else its source) is
-- reusable when an earlier request of the scope had it, and still cached when that earlier request
-- (the latest one that had it) started at most $ttl_s seconds before this one: a prefix cache with a
-- TTL refreshed on every use. A block holds block_size tokens (the last one: what is left of the
-- prompt, cold + read + write). reusable_tokens = tokens of the reusable blocks; missed_tokens =
-- tokens of the reusable blocks that expired (0 for a hit); a request misses when missed_tokens is
-- more than $miss_tokens, cause ttl_expired. A request with nothing reusable (all its blocks new) is
-- not a miss: nothing was there to reuse. A request without hash_ids is not judged: reusable_tokens,
-- missed_tokens, miss and cause are NULL (not applicable). The columns are misses.sql's; position,
-- gap_s, prev_model and prev_context_tokens are NULL (no stream), ttl_in_force_s is $ttl_s.
-- The window runs over the whole lake (blocks seen before the selection count); traceflow narrows
-- the selection in the `filter` block. DuckDB dialect: epoch_us, unnest and
-- generate_subscripts (a block's position in its list, from 1).
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $miss_tokens BIGINT = 1024       how many expired block tokens make a request a miss
--          $ttl_s INTEGER = 300             how long a block stays cached after its last use (seconds)
-- The columns are those of misses.sql; the per-stream ones (prev_model, position, gap_s, ...) are NULL.
-- returns: root_session_id, session_id, parent_session_id, agent, agent_version, model, prev_model,
--          user_id, source, prompt_id, started_at, ended_at, position, gap_s, context_tokens,
--          prev_context_tokens, cold_input_tokens, cache_read_tokens, cache_write_tokens,
--          cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, first_read_tokens,
--          static_prefix_tokens, reusable_tokens, missed_tokens, ttl_in_force_s, compaction_event,
--          restart, miss, cause, event_id
WITH req AS (
    SELECT event_id, session_id, parent_session_id, agent, agent_version, model, user_id, source,
           prompt_id, seq,
           request_time AS t_start,
           recorded_time AS t_end,
           epoch_us(request_time) AS t_us,
           context_tokens,
           coalesce(cold_input_tokens, 0) AS cold_input_tokens,
           coalesce(cache_read_tokens, 0) AS cache_read_tokens,
           coalesce(cache_write_tokens, 0) AS cache_write_tokens,
           cache_write_5m_tokens, cache_write_1h_tokens,
           coalesce(output_tokens, 0) AS output_tokens, hash_ids, block_size,
           coalesce(json_extract_string(attributes, '$.hash_scope'), source) AS scope,
           coalesce(len(hash_ids), 0) > 0 AND coalesce(block_size, 0) > 0 AS judged
    FROM requests
    WHERE total_tokens > 0 AND request_time IS NOT NULL
),
blocks AS (
    SELECT event_id, scope, t_us, seq, context_tokens, block_size,
           unnest(hash_ids) AS hash_id, generate_subscripts(hash_ids, 1) AS i
    FROM req
    WHERE judged
),
seen AS (
    SELECT event_id, t_us,
           greatest(least(block_size, context_tokens - (i - 1) * block_size), 0) AS tokens,
           lag(t_us) OVER (PARTITION BY scope, hash_id ORDER BY t_us, seq, event_id) AS prev_us
    FROM blocks
),
per_request AS (
    SELECT event_id,
           coalesce(sum(tokens) FILTER (WHERE prev_us IS NOT NULL), 0)::BIGINT AS reusable_tokens,
           coalesce(sum(tokens) FILTER (
               WHERE prev_us IS NOT NULL AND t_us - prev_us > CAST($ttl_s AS BIGINT) * 1000000), 0
           )::BIGINT AS expired_tokens
    FROM seen
    GROUP BY event_id
),
sel AS (
    SELECT r.*, p.reusable_tokens, p.expired_tokens,
           CASE WHEN r.judged THEN p.expired_tokens > CAST($miss_tokens AS BIGINT) END AS miss
    FROM req r
    LEFT JOIN per_request p USING (event_id)
    WHERE /*@filter*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT coalesce(parent_session_id, session_id) AS root_session_id, session_id, parent_session_id, agent,
       agent_version, model, CAST(NULL AS STRING) AS prev_model, user_id, source, prompt_id,
       t_start AS started_at, t_end AS ended_at,
       CAST(NULL AS BIGINT) AS position, CAST(NULL AS DOUBLE) AS gap_s, context_tokens,
       CAST(NULL AS BIGINT) AS prev_context_tokens, cold_input_tokens,
       cache_read_tokens, cache_write_tokens, cache_write_5m_tokens, cache_write_1h_tokens,
       output_tokens, CAST(NULL AS BIGINT) AS first_read_tokens,
       CAST(NULL AS BIGINT) AS static_prefix_tokens, reusable_tokens,
       CASE WHEN miss THEN expired_tokens WHEN judged THEN 0 END::BIGINT AS missed_tokens,
       CAST($ttl_s AS INTEGER) AS ttl_in_force_s,
       false AS compaction_event,
       false AS restart,
       miss,
       CASE WHEN miss THEN 'ttl_expired' END AS cause,
       event_id
FROM sel
ORDER BY t_start, seq, root_session_id, session_id;
