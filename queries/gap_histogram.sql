-- gap_histogram: idle gaps (as in gaps.sql) counted in log-spaced bins from 0.1 s to 1 day, by kind.
-- Bin edges (seconds): 0, 0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200,
-- 14400, 28800, 86400, then open-ended; a bin holds lo <= gap < hi. Empty bins have no row.
-- Reads request_steps, the window of steps.sql (over the whole lake), and keeps the requests from
-- $since to $until: the selection narrows the rows, never a request's previous one. In a bare DuckDB
-- create request_steps first as steps.sql says, then run this file with its parameters.
-- params:  $since TIMESTAMPTZ = NULL  only requests at or after this time
--          $until TIMESTAMPTZ = NULL  only requests before this time
-- returns: bin, lo_s, hi_s, gaps, human_gaps, agent_gaps, unknown_gaps

WITH edges AS (
    SELECT bin, CAST(lo_s AS DOUBLE) AS lo_s, CAST(hi_s AS DOUBLE) AS hi_s FROM (VALUES
        (0, 0.0, 0.1), (1, 0.1, 0.5), (2, 0.5, 1.0), (3, 1.0, 2.0), (4, 2.0, 5.0), (5, 5.0, 10.0),
        (6, 10.0, 20.0), (7, 20.0, 30.0), (8, 30.0, 60.0), (9, 60.0, 120.0), (10, 120.0, 300.0),
        (11, 300.0, 600.0), (12, 600.0, 1200.0), (13, 1200.0, 1800.0), (14, 1800.0, 3600.0),
        (15, 3600.0, 7200.0), (16, 7200.0, 14400.0), (17, 14400.0, 28800.0), (18, 28800.0, 86400.0),
        (19, 86400.0, NULL)
    ) AS e(bin, lo_s, hi_s)
),
binned AS (
    -- gap_bin: the bin steps.sql computes for these edges (tests/test_queries.py checks they agree)
    SELECT kind, gap_bin AS bin
    FROM request_steps
    WHERE position > 1
      AND /*@selection*/ (CAST($since AS TIMESTAMPTZ) IS NULL OR t_start >= CAST($since AS TIMESTAMPTZ))
      AND (CAST($until AS TIMESTAMPTZ) IS NULL OR t_start < CAST($until AS TIMESTAMPTZ)) /*@end*/
)
SELECT e.bin, e.lo_s, e.hi_s,
       count(*)::BIGINT AS gaps,
       sum(CASE WHEN b.kind = 'human' THEN 1 ELSE 0 END)::BIGINT AS human_gaps,
       sum(CASE WHEN b.kind = 'agent' THEN 1 ELSE 0 END)::BIGINT AS agent_gaps,
       sum(CASE WHEN b.kind = 'unknown' THEN 1 ELSE 0 END)::BIGINT AS unknown_gaps
FROM binned b JOIN edges e ON e.bin = b.bin
GROUP BY e.bin, e.lo_s, e.hi_s
ORDER BY e.bin;
