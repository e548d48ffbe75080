-- ttl_validation: what the data says about cache expiry: the cache tokens requests actually wrote
-- and read after short, medium and long idle gaps (as in gaps.sql). If the provider's TTL is near
-- $short_s, requests after longer gaps write far more (their prefix expired). Only requests that
-- report cache tokens (read + write > 0) count.
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's previous one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
--          $short_s DOUBLE = 300      gaps up to this are short (the 5-minute TTL)
--          $long_s DOUBLE = 3600      gaps over this are long (the 1-hour TTL)
-- returns: gap_class, gap_from_s, gap_to_s, requests, human_requests, context_tokens,
--          cache_read_tokens, cache_write_tokens, write_share, mean_cache_write_tokens

WITH classed AS (
    SELECT *,
        CASE WHEN gap_s <= CAST($short_s AS DOUBLE) THEN 1
             WHEN gap_s <= CAST($long_s AS DOUBLE) THEN 2
             ELSE 3 END AS gap_order
    FROM request_steps
    WHERE position > 1 AND cache_read_tokens + cache_write_tokens > 0
      AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT CASE gap_order WHEN 1 THEN 'short' WHEN 2 THEN 'medium' ELSE 'long' END AS gap_class,
       CASE gap_order WHEN 1 THEN 0.0 WHEN 2 THEN CAST($short_s AS DOUBLE) ELSE CAST($long_s AS DOUBLE) END AS gap_from_s,
       CASE gap_order WHEN 1 THEN CAST($short_s AS DOUBLE) WHEN 2 THEN CAST($long_s AS DOUBLE) END AS gap_to_s,
       count(*)::BIGINT AS requests,
       sum(CASE WHEN kind = 'human' THEN 1 ELSE 0 END)::BIGINT AS human_requests,
       sum(context_tokens)::BIGINT AS context_tokens,
       sum(cache_read_tokens)::BIGINT AS cache_read_tokens,
       sum(cache_write_tokens)::BIGINT AS cache_write_tokens,
       sum(cache_write_tokens) / nullif(sum(context_tokens), 0)::DOUBLE AS write_share,
       avg(cache_write_tokens)::DOUBLE AS mean_cache_write_tokens
FROM classed
GROUP BY gap_order
ORDER BY gap_order;
