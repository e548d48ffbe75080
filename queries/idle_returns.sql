-- idle_returns: every "returning user": a main-stream request after an idle gap of at least
-- $idle_after_s (gaps as in gaps.sql), with the cached prefix it had to reload (reload_tokens, as
-- in ttl.sql) and the cache tokens it reported reading and writing.
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's previous one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $idle_after_s DOUBLE = 900     idle seconds after which a request is an idle return
-- returns: root_session_id, session_id, prompt_id, started_at, gap_s, kind, prev_context_tokens,
--          context_tokens, reload_tokens, cache_read_tokens, cache_write_tokens

SELECT root_session_id, session_id, prompt_id, t_start AS started_at, gap_s, kind,
       prev_context_tokens, context_tokens, prefix_tokens AS reload_tokens,
       cache_read_tokens, cache_write_tokens
FROM request_steps
WHERE position > 1 AND parent_session_id IS NULL AND gap_s >= CAST($idle_after_s AS DOUBLE)
  AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
  AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
ORDER BY t_start, root_session_id;
