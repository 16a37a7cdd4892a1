ALTER TABLE "task_attempt" ADD COLUMN "resends" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "resent_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "key_taken_at" timestamp with time zone;