-- One NOTIFY per statement, not per row: a fenced write stores all of a run's events in one
-- INSERT (deltas coalesced, state changes and usage folded in), and a flush stores several runs'
-- events together. The payload is unchanged, "<run_id>:<seq>", now with each run's highest seq of
-- the statement: listeners read every event after the seq they have, so the lower ones are
-- implied.
DROP TRIGGER IF EXISTS run_events_notify ON run_events;

CREATE OR REPLACE FUNCTION agent_runtime_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('agent_runtime_events', run_id::text || ':' || max(seq)::text)
  FROM new_events GROUP BY run_id;
  RETURN NULL;
END
$$;

CREATE TRIGGER run_events_notify AFTER INSERT ON run_events
  REFERENCING NEW TABLE AS new_events
  FOR EACH STATEMENT EXECUTE FUNCTION agent_runtime_notify_events();
