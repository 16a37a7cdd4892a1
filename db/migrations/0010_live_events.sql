ALTER TABLE "task_attempt" ADD COLUMN "progress" jsonb;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "progress_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "task_transition" ADD COLUMN "xact_id" "xid8" DEFAULT pg_current_xact_id() NOT NULL;--> statement-breakpoint
CREATE INDEX "idx_task_transition_xact" ON "task_transition" USING btree ("xact_id","transition_id");--> statement-breakpoint
-- Hand-written: live events (docs/events.md, docs/decisions/0021-event-notify.md). A committed
-- transition or progress change wakes every API process's one LISTEN connection. The payload is
-- ids only (NOTIFY caps payloads at 8000 bytes): the rows stay the truth, the NOTIFY only wakes.
-- k = 't' (a task_transition row, v = its to_version) or 'p' (the attempt's progress changed).
CREATE FUNCTION "vidorch_notify_task_event"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	tenant uuid;
BEGIN
	SELECT "tenant_id" INTO tenant FROM "generation_task" WHERE "task_id" = NEW."task_id";
	IF TG_TABLE_NAME = 'task_transition' THEN
		PERFORM pg_notify('vidorch_task_events', json_build_object('k', 't', 'tenant', tenant, 'task', NEW."task_id", 'v', NEW."to_version")::text);
	ELSE
		PERFORM pg_notify('vidorch_task_events', json_build_object('k', 'p', 'tenant', tenant, 'task', NEW."task_id")::text);
	END IF;
	RETURN NULL;
END
$$;--> statement-breakpoint
CREATE TRIGGER "task_transition_notify" AFTER INSERT ON "task_transition" FOR EACH ROW EXECUTE FUNCTION "vidorch_notify_task_event"();--> statement-breakpoint
CREATE TRIGGER "task_attempt_progress_notify" AFTER UPDATE OF "progress" ON "task_attempt" FOR EACH ROW WHEN (NEW."progress" IS DISTINCT FROM OLD."progress") EXECUTE FUNCTION "vidorch_notify_task_event"();
