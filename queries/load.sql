-- load: arrivals and load over time, one row per bucket of $resolution_s seconds from the first to
-- the last request: new sessions (sub-agents fold into their session; a request without a session
-- id is not a session: sessionless traces such as Mooncake count as requests only), sessions open
-- (between their first selected request's start and their last selected request's end), requests,
-- and tokens per second by kind. A session is new in the bucket of its first request in the whole
-- lake, and only where that request is selected: a window that starts inside a session does not
-- count it as new, so new sessions, like requests and tokens, add up over disjoint windows (at one
-- $resolution_s: traceflow coarsens a wide selection more than a window of it, and says so).
-- A request counts in the bucket where it starts. Requests without tokens are left out. The grid
-- never passes $max_buckets buckets: a wider one is an error that says to coarsen $resolution_s
-- (traceflow picks a coarser width itself: traceflow.store.time_base.grid_resolution).
-- DuckDB dialect: generate_series, to_timestamp.
-- Reads request_steps (one row per request with tokens; only its times, session and tokens), the
-- window of steps.sql (over the whole lake), and keeps the requests from $since to $until. In a bare
-- DuckDB create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL    only requests at or after this time
--          $until TIMESTAMPTZ = NULL    only requests before this time
--          $resolution_s DOUBLE = 60    bucket width in seconds
--          $max_buckets BIGINT = 100000 the most buckets the grid may have
-- returns: bucket_start, new_sessions, active_sessions, requests, requests_per_s,
--          cold_input_tokens_per_s, cache_read_tokens_per_s, cache_write_tokens_per_s,
--          output_tokens_per_s

WITH knobs AS (
    SELECT CAST($resolution_s AS DOUBLE) AS res_s, CAST($resolution_s AS DOUBLE) * 1e6 AS res_us
),
req AS (
    -- the session's key, NULL for a request without a session (request_steps keys it apart)
    SELECT CASE WHEN root_session_id IS NOT NULL THEN root_key END AS root_key,
           t_start_us AS start_us, t_end_us AS end_us,
           cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens
    FROM request_steps
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
),
firsts AS (
    -- each session's first start in the whole lake (the selection narrows req, not this)
    SELECT root_key, min(t_start_us) AS first_us
    FROM request_steps
    WHERE root_session_id IS NOT NULL
    GROUP BY root_key
),
agg AS (
    -- one pass, two groupings: each session's span (by_session = 1) and each bucket's totals;
    -- sessions are keyed by the 64-bit hash of their id (a collision, ~1e-8 for a million
    -- sessions, would merge two); requests without a session fall in one NULL group, left out below
    SELECT GROUPING(r.bucket) AS by_session,
           r.root_key,
           r.bucket,
           min(r.start_us) AS first_us,
           max(r.end_us) AS last_us,
           count(*)::BIGINT AS requests,
           sum(r.cold_input_tokens)::BIGINT AS cold_input_tokens,
           sum(r.cache_read_tokens)::BIGINT AS cache_read_tokens,
           sum(r.cache_write_tokens)::BIGINT AS cache_write_tokens,
           sum(r.output_tokens)::BIGINT AS output_tokens
    FROM (SELECT q.*, CAST(floor(q.start_us / k.res_us) AS BIGINT) AS bucket FROM req q, knobs k) AS r
    GROUP BY GROUPING SETS ((r.root_key), (r.bucket))
),
session_changes AS (
    -- a session is open from the bucket of its first selected start to that of its last selected
    -- end; it is new there when that start is its first in the whole lake
    SELECT bucket, sum(new_sessions)::BIGINT AS new_sessions, sum(delta)::BIGINT AS delta
    FROM (
        SELECT CAST(floor(a.first_us / k.res_us) AS BIGINT) AS bucket,
               CASE WHEN a.first_us = f.first_us THEN 1 ELSE 0 END AS new_sessions, 1 AS delta
        FROM agg a JOIN firsts f ON f.root_key = a.root_key, knobs k
        WHERE a.by_session = 1 AND a.root_key IS NOT NULL
        UNION ALL
        SELECT CAST(floor(a.last_us / k.res_us) AS BIGINT) + 1 AS bucket, 0 AS new_sessions, -1 AS delta
        FROM agg a, knobs k WHERE a.by_session = 1 AND a.root_key IS NOT NULL
    ) AS changes
    GROUP BY bucket
),
per_bucket AS (
    SELECT bucket, requests, cold_input_tokens, cache_read_tokens, cache_write_tokens, output_tokens
    FROM agg
    WHERE by_session = 0
),
buckets AS (
    SELECT unnest(generate_series(min(bucket), grid_end('load', min(bucket), max(bucket),
           CAST($max_buckets AS BIGINT), CAST($resolution_s AS DOUBLE)))) AS bucket
    FROM per_bucket
)
SELECT to_timestamp(b.bucket * k.res_s) AS bucket_start,
       coalesce(c.new_sessions, 0)::BIGINT AS new_sessions,
       (sum(coalesce(c.delta, 0)) OVER (ORDER BY b.bucket ROWS UNBOUNDED PRECEDING))::BIGINT AS active_sessions,
       coalesce(p.requests, 0)::BIGINT AS requests,
       coalesce(p.requests, 0) / k.res_s AS requests_per_s,
       coalesce(p.cold_input_tokens, 0) / k.res_s AS cold_input_tokens_per_s,
       coalesce(p.cache_read_tokens, 0) / k.res_s AS cache_read_tokens_per_s,
       coalesce(p.cache_write_tokens, 0) / k.res_s AS cache_write_tokens_per_s,
       coalesce(p.output_tokens, 0) / k.res_s AS output_tokens_per_s
FROM buckets b
CROSS JOIN knobs k
LEFT JOIN session_changes c ON c.bucket = b.bucket
LEFT JOIN per_bucket p ON p.bucket = b.bucket
ORDER BY b.bucket;
