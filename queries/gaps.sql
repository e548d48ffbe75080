-- gaps: every idle gap between consecutive requests of a session stream, classed agent or human.
-- A stream is one (session_id, parent_session_id): a sub-agent is its own stream, a request
-- without a session_id stands alone (it has no gap). Requests are
-- ordered by (started_at, seq); a request's gap is its started_at minus the previous
-- request's ended_at, in seconds, clamped at 0 (a missing start or end falls back to the other).
-- kind is agent when the prompt_id is the previous request's (a tool loop), human when it is new,
-- unknown when the source has no prompt ids. A stream's first request has no gap and no row; a gap's
-- row is the request that ends it (event_id).
-- gap_bin is the gap's bin in the log-spaced histogram (see steps.sql).
-- Requests without tokens (failed calls) are left out. DuckDB dialect: epoch_us.
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's previous one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
-- returns: root_session_id, session_id, parent_session_id, agent, model, user_id, source, prompt_id,
--          started_at, position, gap_s, kind, context_tokens, prefix_tokens, cache_read_tokens,
--          cache_write_tokens, gap_bin, agent_version, event_id

SELECT root_session_id, session_id, parent_session_id, agent, model, user_id, source, prompt_id,
       t_start AS started_at, position, gap_s, kind,
       context_tokens, prefix_tokens, cache_read_tokens, cache_write_tokens, gap_bin, agent_version,
       event_id
FROM request_steps
WHERE position > 1
  AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
  AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
/*@order*/ ORDER BY root_session_id, session_id, parent_session_id NULLS FIRST, position /*@end*/;
