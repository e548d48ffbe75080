-- tokens_by_model: token totals per model, with the cache writes' TTL split where the source has
-- it and the cost the agents reported (cost_usd; NULL where none did).
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
-- returns: model, requests, cold_input_tokens, cache_read_tokens, cache_write_tokens,
--          cache_write_5m_tokens, cache_write_1h_tokens, output_tokens, reported_cost_usd

WITH sel AS (
    SELECT *
    FROM requests
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR request_time >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR request_time < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT model,
       count(*)::BIGINT AS requests,
       total(cold_input_tokens) AS cold_input_tokens,
       total(cache_read_tokens) AS cache_read_tokens,
       total(cache_write_tokens) AS cache_write_tokens,
       total(cache_write_5m_tokens) AS cache_write_5m_tokens,
       total(cache_write_1h_tokens) AS cache_write_1h_tokens,
       total(output_tokens) AS output_tokens,
       sum(cost_usd)::DOUBLE AS reported_cost_usd
FROM sel
GROUP BY model
ORDER BY model NULLS FIRST;
