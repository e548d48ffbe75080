-- token_mix: the four token kinds' totals and shares, and the reuse ratio (docs/everyday.md#traceflow-mix), over all
-- requests in the time window (the same numbers as `traceflow mix`, which reads its `mix` block).
-- reuse_ratio = cache_read / (cold_input + cache_read + cache_write), token-weighted; the macros
-- token_share and reuse_ratio are defined in every traceflow connection (docs/definitions.md).
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
-- returns: requests, cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
--          total_tokens, share_cold_input, share_cache_read, share_cache_write, share_output,
--          reuse_ratio

WITH sel AS (
    SELECT *
    FROM requests
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR request_time >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR request_time < CAST($until AS TIMESTAMPTZ)) /*@end*/
),
sums AS (
    SELECT count(*)::BIGINT AS requests,
           total(cold_input_tokens) AS cold_input_tokens,
           total(cache_read_tokens) AS cache_read_tokens,
           total(cache_write_tokens) AS cache_write_tokens,
           total(output_tokens) AS output_tokens
    FROM sel
)
SELECT requests, cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
       /*@mix*/ (cold_input_tokens + cache_read_tokens + cache_write_tokens + output_tokens)::BIGINT AS total_tokens,
       token_share(cold_input_tokens, total_tokens) AS share_cold_input,
       token_share(cache_read_tokens, total_tokens) AS share_cache_read,
       token_share(cache_write_tokens, total_tokens) AS share_cache_write,
       token_share(output_tokens, total_tokens) AS share_output,
       reuse_ratio(cache_read_tokens, cold_input_tokens + cache_read_tokens + cache_write_tokens) AS reuse_ratio /*@end*/
FROM sums;
