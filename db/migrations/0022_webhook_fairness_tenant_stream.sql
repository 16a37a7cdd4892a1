CREATE TABLE "webhook_target" (
	"target_key" text PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"timeouts" integer DEFAULT 0 NOT NULL,
	"blocked_until" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
DROP INDEX "idx_webhook_delivery_target_pending";--> statement-breakpoint
-- Hand-written: the column is added empty, filled for every row that exists, then made NOT NULL
-- (drizzle-kit's one-line NOT NULL add fails on a table with rows).
ALTER TABLE "task_transition" ADD COLUMN "tenant_id" uuid;--> statement-breakpoint
-- Hand-written: every writer of task_transition (the create statement, the task CAS, settlement,
-- operators' repairs, the benchmarks' copies of the create) gets the tenant from the task row,
-- as the webhook and notify triggers do: no code path can write a row the tenant stream's index
-- leaves out (docs/decisions/0020-event-stream-resume.md). The create statement writes the task
-- row in a sibling CTE its transition selects from, so the row is there when this fires.
CREATE FUNCTION "vidorch_transition_tenant"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW."tenant_id" IS NULL THEN
		SELECT "tenant_id" INTO NEW."tenant_id" FROM "generation_task" WHERE "task_id" = NEW."task_id";
	END IF;
	RETURN NEW;
END
$$;--> statement-breakpoint
CREATE TRIGGER "task_transition_tenant" BEFORE INSERT ON "task_transition" FOR EACH ROW EXECUTE FUNCTION "vidorch_transition_tenant"();--> statement-breakpoint
-- Hand-written: the record is append-only (0008); this fills a new column of rows that exist,
-- rewriting nothing they recorded, so the refusal is lifted for this one statement.
ALTER TABLE "task_transition" DISABLE TRIGGER "task_transition_append_only";--> statement-breakpoint
UPDATE "task_transition" tt SET "tenant_id" = g."tenant_id" FROM "generation_task" g WHERE g."task_id" = tt."task_id" AND tt."tenant_id" IS NULL;--> statement-breakpoint
ALTER TABLE "task_transition" ENABLE TRIGGER "task_transition_append_only";--> statement-breakpoint
ALTER TABLE "task_transition" ALTER COLUMN "tenant_id" SET NOT NULL;--> statement-breakpoint
CREATE INDEX "idx_task_open_webhook_origin" ON "generation_task" USING btree ("tenant_id",substring(("request" ->> 'webhook_url') from '^[A-Za-z]+://[^/?#]+')) WHERE "generation_task"."terminal_at" IS NULL AND ("generation_task"."request" ->> 'webhook_url') IS NOT NULL;--> statement-breakpoint
CREATE INDEX "idx_task_transition_tenant_xact" ON "task_transition" USING btree ("tenant_id","xact_id","transition_id");--> statement-breakpoint
-- The stream's order across all tenants (0010): nothing reads it now the tenant stream has its own.
DROP INDEX "idx_task_transition_xact";--> statement-breakpoint
CREATE INDEX "idx_webhook_delivery_tenant_target_due" ON "webhook_delivery" USING btree ("tenant_id","target_key","next_attempt_at") WHERE "webhook_delivery"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "idx_webhook_delivery_tenant_leased" ON "webhook_delivery" USING btree ("tenant_id","lease_until") WHERE "webhook_delivery"."state" = 'pending' AND "webhook_delivery"."lease_until" IS NOT NULL;
