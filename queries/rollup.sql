-- rollup: token totals per UTC day, agent, model, session, user and source.
-- session_id is the session a request belongs to, with sub-agents folded into the session that
-- spawned them (coalesce(parent_session_id, session_id)); day is the UTC day of the request's time
-- (request_time), NULL when it has none. `traceflow compact` stores this query's
-- result as the request_rollup view; `traceflow mix` sums it instead of scanning every request when
-- the selection is the whole lake, or filters only on these columns and on whole UTC days.
-- params:  none
-- returns: day, agent, model, session_id, user_id, source, requests, cold_input_tokens,
--          cache_read_tokens, cache_write_tokens, output_tokens, cache_write_1h_tokens

SELECT strftime(request_time AT TIME ZONE 'UTC', '%Y-%m-%d') AS day,
       agent, model, coalesce(parent_session_id, session_id) AS session_id, user_id, source,
       count(*)::BIGINT AS requests,
       total(cold_input_tokens) AS cold_input_tokens,
       total(cache_read_tokens) AS cache_read_tokens,
       total(cache_write_tokens) AS cache_write_tokens,
       total(output_tokens) AS output_tokens,
       total(cache_write_1h_tokens) AS cache_write_1h_tokens
FROM requests
GROUP BY ALL;
