-- usage_periods: per period, agent, user and model: requests, the token kinds (1-hour writes too) and the first
-- and last recorded time, each request filed at the time the agent recorded it (ended_at, the
-- transcript line's timestamp; started_at when there is none), as ccusage files it. What `daily`,
-- `weekly`, `monthly`, `session` (traceflow.analysis.usage) and `blocks` (traceflow.analysis.blocks:
-- the UTC hour) sum: they replace the `period` block (the UTC day here) with their key and the
-- `agents` block with a predicate keeping agent telemetry only.
-- params:  $since TIMESTAMPTZ = NULL  only requests recorded at or after this time
--          $until TIMESTAMPTZ = NULL  only requests recorded before this time
-- returns: period, agent, user_id, model, requests, cold_input_tokens, cache_read_tokens, cache_write_tokens,
--          cache_write_1h_tokens, output_tokens, first_at, last_at

WITH sel AS (
    SELECT *
    FROM requests
    WHERE recorded_time IS NOT NULL
      AND /*@agents*/ true /*@end*/
      AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR recorded_time >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR recorded_time < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT /*@period*/ strftime(recorded_time AT TIME ZONE 'UTC', '%Y-%m-%d') /*@end*/ AS period,
       agent,
       user_id,
       model,
       count(*)::BIGINT AS requests,
       total(cold_input_tokens) AS cold_input_tokens,
       total(cache_read_tokens) AS cache_read_tokens,
       total(cache_write_tokens) AS cache_write_tokens,
       total(cache_write_1h_tokens) AS cache_write_1h_tokens,
       total(output_tokens) AS output_tokens,
       min(recorded_time) AS first_at,
       max(recorded_time) AS last_at
FROM sel
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4;
