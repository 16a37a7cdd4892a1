CREATE TABLE "region_failover" (
	"failover_id" uuid PRIMARY KEY NOT NULL,
	"resource_scope" text NOT NULL,
	"incident_id" text NOT NULL,
	"operator" text NOT NULL,
	"reason" text NOT NULL,
	"old_region" text NOT NULL,
	"new_region" text NOT NULL,
	"old_epoch" bigint NOT NULL,
	"new_epoch" bigint NOT NULL,
	"replication_position" text NOT NULL,
	"accepted_rpo_seconds" integer NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"traffic_switch_time" timestamp with time zone NOT NULL,
	"first_successful_write_time" timestamp with time zone,
	"reconciliation_result" jsonb
);
--> statement-breakpoint
CREATE UNIQUE INDEX "region_failover_scope_epoch" ON "region_failover" USING btree ("resource_scope","new_epoch");--> statement-breakpoint
CREATE INDEX "idx_region_failover_incident" ON "region_failover" USING btree ("incident_id");