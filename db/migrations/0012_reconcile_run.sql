CREATE TABLE "reconcile_run" (
	"run_id" uuid PRIMARY KEY NOT NULL,
	"reconciler" text NOT NULL,
	"actor" text NOT NULL,
	"dry_run" boolean NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"finished_at" timestamp with time zone NOT NULL,
	"examined" integer NOT NULL,
	"changed" integer NOT NULL,
	"findings" jsonb NOT NULL,
	"findings_total" integer NOT NULL,
	"error" text
);
--> statement-breakpoint
CREATE INDEX "idx_reconcile_run_latest" ON "reconcile_run" USING btree ("reconciler","started_at");