-- working_set: the live KV working set over time: at time t, the sum of context_tokens of the
-- streams (sessions; a sub-agent counts apart) whose last request ended within $ttl_s before t. A
-- request's context counts from its end until the TTL runs out or a later request of the stream
-- ends (the next one, or one after it that ended sooner: a stream holds one context at a time).
-- One row per bucket of $resolution_s seconds from the first to the last change: tokens and streams
-- are averages over the bucket, tokens_end and streams_end the values at its end. Multiply by the
-- model's KV bytes per token for bytes. The grid never passes $max_buckets buckets: a wider one is
-- an error that says to coarsen $resolution_s (traceflow picks a coarser width itself:
-- traceflow.store.time_base.grid_resolution).
-- The selected requests (from $since to $until) make the series, each holding its context until
-- the TTL or a later request of its stream in the whole lake ends: the series of disjoint windows add
-- up to the series of their union, bucket by bucket, at one $resolution_s (traceflow coarsens a
-- wide selection more than a window of it, and says so).
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's next one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL    only requests at or after this time
--          $until TIMESTAMPTZ = NULL    only requests before this time
--          $ttl_s DOUBLE = 300          how long an idle stream's context is kept
--          $resolution_s DOUBLE = 60    bucket width in seconds
--          $max_buckets BIGINT = 100000 the most buckets the grid may have
-- returns: bucket_start, tokens, tokens_end, streams, streams_end

WITH knobs AS (
    SELECT CAST($ttl_s AS DOUBLE) * 1e6 AS ttl_us, CAST($resolution_s AS DOUBLE) * 1e6 AS res_us
),
held AS (
    -- a request's context is held from its end until the TTL runs out or a later request of the
    -- stream ends (next_end_us: the first such end)
    SELECT s.t_end_us AS t0,
           least(s.t_end_us + k.ttl_us, coalesce(s.next_end_us, s.t_end_us + k.ttl_us)) AS t1,
           s.context_tokens AS tokens
    FROM request_steps s, knobs k
    WHERE /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR s.t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR s.t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
),
deltas AS (
    -- +context at t0, -context at t1 (one reference to held: a CTE used twice is materialised)
    SELECT CASE WHEN e.sign = 1 THEN h.t0 ELSE h.t1 END AS t,
           e.sign * h.tokens AS d_tokens, e.sign AS d_streams
    FROM held h CROSS JOIN (VALUES (1), (-1)) AS e(sign)
    WHERE h.t1 > h.t0
),
per_bucket AS (
    -- d_*: the change over the bucket; part_*: the bucket-average share of the changes inside it
    SELECT CAST(floor(d.t / k.res_us) AS BIGINT) AS bucket,
           sum(d.d_tokens)::DOUBLE AS d_tokens,
           sum(d.d_streams)::DOUBLE AS d_streams,
           sum(d.d_tokens * ((floor(d.t / k.res_us) + 1) * k.res_us - d.t) / k.res_us) AS part_tokens,
           sum(d.d_streams * ((floor(d.t / k.res_us) + 1) * k.res_us - d.t) / k.res_us) AS part_streams
    FROM deltas d, knobs k
    GROUP BY 1
),
buckets AS (
    SELECT unnest(generate_series(min(bucket), grid_end('working_set', min(bucket), max(bucket),
           CAST($max_buckets AS BIGINT), CAST($resolution_s AS DOUBLE)))) AS bucket
    FROM per_bucket
),
filled AS (
    SELECT b.bucket,
           coalesce(p.d_tokens, 0) AS d_tokens, coalesce(p.d_streams, 0) AS d_streams,
           coalesce(p.part_tokens, 0) AS part_tokens, coalesce(p.part_streams, 0) AS part_streams
    FROM buckets b LEFT JOIN per_bucket p ON p.bucket = b.bucket
)
SELECT to_timestamp(f.bucket * k.res_us / 1e6) AS bucket_start,
       coalesce(sum(f.d_tokens) OVER before, 0) + f.part_tokens AS tokens,
       sum(f.d_tokens) OVER upto AS tokens_end,
       coalesce(sum(f.d_streams) OVER before, 0) + f.part_streams AS streams,
       CAST(sum(f.d_streams) OVER upto AS BIGINT) AS streams_end
FROM filled f, knobs k
WINDOW before AS (ORDER BY f.bucket ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
       upto AS (ORDER BY f.bucket ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
ORDER BY f.bucket;
