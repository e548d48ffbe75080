-- compactions: every request whose context fell by more than $compaction_drop of the previous
-- request's in its stream (a compaction or reset; streams as in gaps.sql).
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's previous one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL        only requests at or after this time
--          $until TIMESTAMPTZ = NULL        only requests before this time
--          $compaction_drop DOUBLE = 0.5    the drop, as a share of the previous context
-- returns: root_session_id, session_id, parent_session_id, prompt_id, started_at, gap_s,
--          context_before, context_after, drop_share

SELECT root_session_id, session_id, parent_session_id, prompt_id, t_start AS started_at, gap_s,
       prev_context_tokens AS context_before, context_tokens AS context_after,
       1 - context_tokens / prev_context_tokens::DOUBLE AS drop_share
FROM request_steps
WHERE position > 1 AND context_tokens < (1 - CAST($compaction_drop AS DOUBLE)) * prev_context_tokens
  AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
  AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
ORDER BY t_start, root_session_id;
