CREATE TABLE "region_failover_event" (
	"failover_id" uuid NOT NULL,
	"kind" text NOT NULL,
	"first_successful_write_time" timestamp with time zone,
	"reconciliation_result" jsonb,
	"recorded_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "region_failover_event_failover_id_kind_pk" PRIMARY KEY("failover_id","kind"),
	CONSTRAINT "region_failover_event_kind_check" CHECK (("region_failover_event"."kind" = 'first_write' AND "region_failover_event"."first_successful_write_time" IS NOT NULL AND "region_failover_event"."reconciliation_result" IS NULL)
        OR ("region_failover_event"."kind" = 'reconciliation' AND "region_failover_event"."reconciliation_result" IS NOT NULL AND "region_failover_event"."first_successful_write_time" IS NULL))
);
--> statement-breakpoint
ALTER TABLE "region_failover_event" ADD CONSTRAINT "region_failover_event_failover_id_region_failover_failover_id_fk" FOREIGN KEY ("failover_id") REFERENCES "public"."region_failover"("failover_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
-- Hand-written: the later facts of existing failovers move to region_failover_event before
-- their columns go (docs/runbooks/failover.md).
INSERT INTO "region_failover_event" ("failover_id", "kind", "first_successful_write_time")
	SELECT "failover_id", 'first_write', "first_successful_write_time" FROM "region_failover" WHERE "first_successful_write_time" IS NOT NULL;--> statement-breakpoint
INSERT INTO "region_failover_event" ("failover_id", "kind", "reconciliation_result")
	SELECT "failover_id", 'reconciliation', "reconciliation_result" FROM "region_failover" WHERE "reconciliation_result" IS NOT NULL;--> statement-breakpoint
ALTER TABLE "region_failover" DROP COLUMN "first_successful_write_time";--> statement-breakpoint
ALTER TABLE "region_failover" DROP COLUMN "reconciliation_result";--> statement-breakpoint
-- Hand-written: the record cannot be rewritten (docs/decisions/0017-append-only-record.md).
-- UPDATE and DELETE (row triggers) and TRUNCATE (statement triggers) of the record tables are
-- refused with SQLSTATE VR001; INSERT is untouched. Corrections are new rows (docs/billing.md).
CREATE FUNCTION "vidorch_refuse_rewrite"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION '% on % refused: the table is append-only', TG_OP, TG_TABLE_NAME
		USING ERRCODE = 'VR001', HINT = 'record a correction as a new row with its own business key (docs/billing.md)';
END
$$;--> statement-breakpoint
CREATE TRIGGER "credit_ledger_append_only" BEFORE UPDATE OR DELETE ON "credit_ledger" FOR EACH ROW EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "credit_ledger_no_truncate" BEFORE TRUNCATE ON "credit_ledger" FOR EACH STATEMENT EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "task_transition_append_only" BEFORE UPDATE OR DELETE ON "task_transition" FOR EACH ROW EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "task_transition_no_truncate" BEFORE TRUNCATE ON "task_transition" FOR EACH STATEMENT EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "ops_audit_append_only" BEFORE UPDATE OR DELETE ON "ops_audit" FOR EACH ROW EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "ops_audit_no_truncate" BEFORE TRUNCATE ON "ops_audit" FOR EACH STATEMENT EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "region_failover_append_only" BEFORE UPDATE OR DELETE ON "region_failover" FOR EACH ROW EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "region_failover_no_truncate" BEFORE TRUNCATE ON "region_failover" FOR EACH STATEMENT EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "region_failover_event_append_only" BEFORE UPDATE OR DELETE ON "region_failover_event" FOR EACH ROW EXECUTE FUNCTION "vidorch_refuse_rewrite"();--> statement-breakpoint
CREATE TRIGGER "region_failover_event_no_truncate" BEFORE TRUNCATE ON "region_failover_event" FOR EACH STATEMENT EXECUTE FUNCTION "vidorch_refuse_rewrite"();
