CREATE INDEX "idx_slot_wait_lines" ON "slot_wait" USING btree ("provider","tenant_id","priority","since","attempt_id") WHERE "slot_wait"."granted_at" IS NULL;--> statement-breakpoint
-- Hand-written: a provider's report that a job finished frees the job's slot the moment it is
-- stored (db/slot-queue.ts holdsSlot stops counting it), so the provider's grant pass runs then,
-- in a worker (workers/slot-grant-waker.ts answers 'vidorch_slot_freed'), not only when the task's
-- workflow applies the report: the slot goes to the next job one workflow round trip sooner.
CREATE FUNCTION "vidorch_notify_slot_freed"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM "slot_wait" WHERE "provider" = NEW."provider" AND "granted_at" IS NULL) THEN
		PERFORM pg_notify('vidorch_slot_freed', NEW."provider");
	END IF;
	RETURN NULL;
END
$$;--> statement-breakpoint
CREATE TRIGGER "callback_inbox_slot_freed" AFTER INSERT ON "callback_inbox" FOR EACH ROW
	WHEN (NEW."processed_at" IS NULL AND NEW."attempt_id" IS NOT NULL AND NEW."event_type" IN ('succeeded', 'failed', 'canceled', 'aborted'))
	EXECUTE FUNCTION "vidorch_notify_slot_freed"();
