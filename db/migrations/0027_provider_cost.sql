ALTER TABLE "task_attempt" ADD COLUMN "provider_cost" numeric(18, 6);--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "provider_cost_unit" text;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "provider_cost_source" text;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "provider_cost_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD CONSTRAINT "task_attempt_provider_cost_source_check" CHECK ("task_attempt"."provider_cost_source" IS NULL OR "task_attempt"."provider_cost_source" IN ('reported', 'computed', 'unknown'));--> statement-breakpoint
ALTER TABLE "task_attempt" ADD CONSTRAINT "task_attempt_provider_cost_nonneg" CHECK ("task_attempt"."provider_cost" IS NULL OR "task_attempt"."provider_cost" >= 0);