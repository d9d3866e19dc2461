-- pg-waits.sql: what Postgres's client backends wait on, sampled every ~3 ms for ~15 s.
-- Run it beside a load, against any database of the cluster:
--
--   psql "$FLASHSALE_PG" -X -At -v db=flashsale_bench_s5 -f bench/pg-waits.sql
--
-- It prints the samples by wait event (CPU: active with no wait event), then the longest
-- unbroken stretches one backend spent in one wait, over 20 ms. The samples stay in a
-- temporary table: nothing is written to the database.
\if :{?db}
\else
\set db flashsale
\endif
CREATE TEMP TABLE pg_waits_sample (t timestamptz, pid int, datname text, what text);
DO $$
BEGIN
    FOR i IN 1..4000 LOOP
        PERFORM pg_stat_clear_snapshot(); -- else the transaction sees one snapshot throughout
        INSERT INTO pg_waits_sample
        SELECT clock_timestamp(), pid, datname,
               coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-')
          FROM pg_stat_activity
         WHERE backend_type = 'client backend' AND state = 'active'
           AND pid <> pg_backend_pid();
        PERFORM pg_sleep(0.003);
    END LOOP;
END $$;
SELECT what, count(*) FROM pg_waits_sample WHERE datname = :'db' GROUP BY what ORDER BY 2 DESC;
WITH x AS (
    SELECT *, lag(what) OVER w AS prev_what, lag(t) OVER w AS prev_t
      FROM pg_waits_sample WHERE datname = :'db' WINDOW w AS (PARTITION BY pid ORDER BY t)),
g AS (
    SELECT *, sum(CASE WHEN what IS DISTINCT FROM prev_what OR t - prev_t > interval '15 ms'
                       THEN 1 ELSE 0 END) OVER (PARTITION BY pid ORDER BY t) AS stretch
      FROM x)
SELECT 'stretch', what, round(extract(epoch FROM max(t) - min(t)) * 1000) AS ms,
       to_char(min(t), 'HH24:MI:SS.MS') AS from_time
  FROM g GROUP BY pid, stretch, what
HAVING max(t) - min(t) > interval '20 ms'
 ORDER BY ms DESC LIMIT 12;
