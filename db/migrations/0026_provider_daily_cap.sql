CREATE TABLE "provider_create_cap" (
	"provider" text NOT NULL,
	"provider_model" text NOT NULL,
	"capped_until" timestamp with time zone NOT NULL,
	"capped_at" timestamp with time zone NOT NULL,
	"refusals" integer DEFAULT 1 NOT NULL,
	"last_error" text,
	CONSTRAINT "provider_create_cap_provider_provider_model_pk" PRIMARY KEY("provider","provider_model")
);
--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "capped_since" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD COLUMN "capped_until" timestamp with time zone;