CREATE TABLE "provider_control" (
	"provider" text PRIMARY KEY NOT NULL,
	"breaker_force" text,
	"max_in_flight" integer,
	"reason" text,
	"updated_by" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "provider_control_breaker_force_check" CHECK ("provider_control"."breaker_force" IS NULL OR "provider_control"."breaker_force" IN ('open', 'closed')),
	CONSTRAINT "provider_control_max_in_flight_check" CHECK ("provider_control"."max_in_flight" IS NULL OR "provider_control"."max_in_flight" >= 0)
);
--> statement-breakpoint
CREATE INDEX "idx_attempt_provider_in_flight" ON "task_attempt" USING btree ("provider") WHERE "task_attempt"."submit_state" IN ('SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN');