ALTER TABLE "provider_control" ADD COLUMN "create_tat" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "throttled" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "paced_until" timestamp with time zone;