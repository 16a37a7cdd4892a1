ALTER TABLE "generation_task" ADD COLUMN "media_failures" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "send_by" timestamp with time zone;