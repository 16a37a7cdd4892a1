CREATE TABLE "output_download" (
	"attempt_id" uuid PRIMARY KEY NOT NULL,
	"task_id" uuid NOT NULL,
	"location" text NOT NULL,
	"partial_key" text NOT NULL,
	"upload_id" text NOT NULL,
	"parts" jsonb NOT NULL,
	"bytes_stored" bigint NOT NULL,
	"total_bytes" bigint,
	"source_validator" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "asset" ADD COLUMN "location" text DEFAULT 'primary' NOT NULL;--> statement-breakpoint
ALTER TABLE "asset" ADD COLUMN "source_url" text;--> statement-breakpoint
ALTER TABLE "asset" ADD COLUMN "downloaded_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "asset" ADD COLUMN "download_ms" integer;--> statement-breakpoint
ALTER TABLE "asset" ADD COLUMN "deleted_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "tenant" ADD COLUMN "output_retention_days" integer;--> statement-breakpoint
ALTER TABLE "output_download" ADD CONSTRAINT "output_download_task_id_generation_task_task_id_fk" FOREIGN KEY ("task_id") REFERENCES "public"."generation_task"("task_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "idx_asset_fallback" ON "asset" USING btree ("created_at") WHERE "asset"."location" = 'fallback' AND "asset"."deleted_at" IS NULL;--> statement-breakpoint
ALTER TABLE "asset" ADD CONSTRAINT "asset_location_check" CHECK ("asset"."location" IN ('primary', 'fallback'));