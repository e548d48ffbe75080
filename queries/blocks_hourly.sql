-- blocks_hourly: per UTC hour, user, source and model: requests, the token kinds and the first and
-- last request time, each request at the time the agent recorded it (`recorded_time`, as ccusage). The input of the 5-hour billing blocks (`traceflow blocks`): a block starts at a
-- whole UTC hour and lasts whole hours, so every request of one hour falls in the same block; each
-- user has their own chain, and traceflow leaves out the public traces' sources (not a bill).
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
-- returns: hour_start, user_id, source, model, requests, cold_input_tokens, cache_read_tokens, cache_write_tokens,
--          cache_write_1h_tokens, output_tokens, first_at, last_at

WITH sel AS (
    SELECT *
    FROM requests
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR recorded_time >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR recorded_time < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT date_trunc('hour', recorded_time AT TIME ZONE 'UTC') AS hour_start,
       user_id,
       source,
       model,
       count(*)::BIGINT AS requests,
       coalesce(sum(cold_input_tokens), 0)::BIGINT AS cold_input_tokens,
       coalesce(sum(cache_read_tokens), 0)::BIGINT AS cache_read_tokens,
       coalesce(sum(cache_write_tokens), 0)::BIGINT AS cache_write_tokens,
       coalesce(sum(cache_write_1h_tokens), 0)::BIGINT AS cache_write_1h_tokens,
       coalesce(sum(output_tokens), 0)::BIGINT AS output_tokens,
       min(recorded_time) AS first_at,
       max(recorded_time) AS last_at
FROM sel
WHERE recorded_time IS NOT NULL
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4;
