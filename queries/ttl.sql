-- ttl: the cache-TTL what-if: for a TTL, the requests whose cached prefix would have expired and
-- the tokens each request would read from and write to the cache, per model.
-- Model: a request whose idle gap (as in gaps.sql) exceeds the TTL finds its prefix expired and
-- writes it again (rewrite_tokens); otherwise it reads the prefix and writes only what is new. The
-- prefix is the previous request's context plus its output, at most this request's context. A
-- stream's first request writes its whole context. traceflow.analysis.ttl prices the tokens.
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's previous one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
--          $ttl_s DOUBLE = 300        the cache TTL in seconds
-- returns: ttl_s, model, requests, expired_requests, context_tokens, rewrite_tokens, read_tokens,
--          write_tokens, output_tokens

WITH ttls AS (
    /*@ttls*/ SELECT CAST($ttl_s AS DOUBLE) AS ttl_s /*@end*/
)
SELECT t.ttl_s, s.model,
       count(*)::BIGINT AS requests,
       sum(CASE WHEN s.gap_s > t.ttl_s THEN 1 ELSE 0 END)::BIGINT AS expired_requests,
       sum(s.context_tokens)::BIGINT AS context_tokens,
       sum(CASE WHEN s.gap_s > t.ttl_s THEN s.prefix_tokens ELSE 0 END)::BIGINT AS rewrite_tokens,
       sum(CASE WHEN s.gap_s > t.ttl_s THEN 0 ELSE s.prefix_tokens END)::BIGINT AS read_tokens,
       sum(s.context_tokens - CASE WHEN s.gap_s > t.ttl_s THEN 0 ELSE s.prefix_tokens END)::BIGINT AS write_tokens,
       sum(s.output_tokens)::BIGINT AS output_tokens
FROM request_steps s CROSS JOIN ttls t
WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
  AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
GROUP BY t.ttl_s, s.model
ORDER BY t.ttl_s, s.model NULLS FIRST;
