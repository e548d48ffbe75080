-- tokens_by_session: token totals per session (sub-agents folded into the session that spawned
-- them), largest first: requests, sub-agent streams, time span, the four kinds, reuse ratio.
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
--          $limit BIGINT = 100        at most this many sessions
-- returns: root_session_id, agent, model, requests, subagents, first_at, last_at,
--          cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, total_tokens,
--          reuse_ratio

WITH sel AS (
    SELECT *
    FROM requests
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR request_time >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR request_time < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT coalesce(parent_session_id, session_id) AS root_session_id,
       max(agent) AS agent, max(model) AS model,
       count(*)::BIGINT AS requests,
       count(DISTINCT CASE WHEN parent_session_id IS NOT NULL THEN session_id END)::BIGINT AS subagents,
       min(request_time) AS first_at,
       max(recorded_time) AS last_at,
       total(cold_input_tokens) AS cold_input_tokens,
       total(cache_read_tokens) AS cache_read_tokens,
       total(cache_write_tokens) AS cache_write_tokens,
       total(output_tokens) AS output_tokens,
       total(total_tokens) AS total_tokens,
       reuse_ratio(sum(cache_read_tokens), sum(context_tokens)) AS reuse_ratio
FROM sel
GROUP BY coalesce(parent_session_id, session_id)
ORDER BY total_tokens DESC, root_session_id
LIMIT CAST($limit AS BIGINT);
