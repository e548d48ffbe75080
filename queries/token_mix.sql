-- token_mix: the four token kinds' totals and shares, and the reuse ratio (docs/everyday.md#traceflow-mix), over all
-- requests in the time window (the same numbers as `traceflow mix`).
-- reuse_ratio = cache_read / (cold_input + cache_read + cache_write), token-weighted.
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
-- returns: requests, cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
--          total_tokens, share_cold_input, share_cache_read, share_cache_write, share_output,
--          reuse_ratio

WITH sel AS (
    SELECT *
    FROM requests
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR coalesce(started_at, ended_at) >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR coalesce(started_at, ended_at) < CAST($until AS TIMESTAMPTZ)) /*@end*/
),
sums AS (
    SELECT count(*)::BIGINT AS requests,
           coalesce(sum(cold_input_tokens), 0)::BIGINT AS cold_input_tokens,
           coalesce(sum(cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
           coalesce(sum(cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
           coalesce(sum(output_tokens), 0)::BIGINT AS output_tokens
    FROM sel
)
SELECT requests, cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
       (cold_input_tokens + cache_read_tokens + cache_write_tokens + output_tokens) AS total_tokens,
       cold_input_tokens / nullif(cold_input_tokens + cache_read_tokens + cache_write_tokens + output_tokens, 0)::DOUBLE AS share_cold_input,
       cache_read_tokens / nullif(cold_input_tokens + cache_read_tokens + cache_write_tokens + output_tokens, 0)::DOUBLE AS share_cache_read,
       cache_write_tokens / nullif(cold_input_tokens + cache_read_tokens + cache_write_tokens + output_tokens, 0)::DOUBLE AS share_cache_write,
       output_tokens / nullif(cold_input_tokens + cache_read_tokens + cache_write_tokens + output_tokens, 0)::DOUBLE AS share_output,
       cache_read_tokens / nullif(cold_input_tokens + cache_read_tokens + cache_write_tokens, 0)::DOUBLE AS reuse_ratio
FROM sums;
