-- reuse_by_day: per UTC day: requests, sessions, the four token kinds and the token-weighted reuse
-- ratio cache_read / (cold_input + cache_read + cache_write).
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
-- returns: day, requests, sessions, cold_input_tokens, cache_read_tokens, cache_write_tokens,
--          output_tokens, reuse_ratio

WITH sel AS (
    SELECT *
    FROM requests
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR request_time >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR request_time < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT CAST(request_time AT TIME ZONE 'UTC' AS DATE) AS day,
       count(*)::BIGINT AS requests,
       count(DISTINCT coalesce(parent_session_id, session_id))::BIGINT AS sessions,
       total(cold_input_tokens) AS cold_input_tokens,
       total(cache_read_tokens) AS cache_read_tokens,
       total(cache_write_tokens) AS cache_write_tokens,
       total(output_tokens) AS output_tokens,
       reuse_ratio(sum(cache_read_tokens), sum(context_tokens)) AS reuse_ratio
FROM sel
GROUP BY 1
ORDER BY 1;
