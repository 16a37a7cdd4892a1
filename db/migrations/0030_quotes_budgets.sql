CREATE TABLE "budget_threshold_crossing" (
	"budget_id" uuid NOT NULL,
	"period_start" timestamp with time zone NOT NULL,
	"threshold" integer NOT NULL,
	"spent" numeric(18, 6) NOT NULL,
	"event_id" uuid NOT NULL,
	"crossed_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "budget_threshold_crossing_budget_id_period_start_threshold_pk" PRIMARY KEY("budget_id","period_start","threshold")
);
--> statement-breakpoint
CREATE TABLE "spend_budget" (
	"budget_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"key_id" uuid,
	"limit_amount" numeric(18, 6),
	"period" text DEFAULT 'month' NOT NULL,
	"thresholds" integer[] NOT NULL,
	"reason" text,
	"updated_by" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "spend_budget_period_check" CHECK ("spend_budget"."period" IN ('day', 'week', 'month')),
	CONSTRAINT "spend_budget_limit_nonneg" CHECK ("spend_budget"."limit_amount" IS NULL OR "spend_budget"."limit_amount" >= 0)
);
--> statement-breakpoint
CREATE TABLE "task_quote" (
	"quote_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"request_hash" text NOT NULL,
	"model" text NOT NULL,
	"amount" numeric(18, 6) NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "task_quote_amount_nonneg" CHECK ("task_quote"."amount" >= 0)
);
--> statement-breakpoint
ALTER TABLE "webhook_event" DROP CONSTRAINT "webhook_event_type_check";--> statement-breakpoint
ALTER TABLE "webhook_event" ALTER COLUMN "task_id" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_event" ALTER COLUMN "status" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_event" ALTER COLUMN "status_version" DROP NOT NULL;--> statement-breakpoint
ALTER TABLE "budget_threshold_crossing" ADD CONSTRAINT "budget_threshold_crossing_budget_id_spend_budget_budget_id_fk" FOREIGN KEY ("budget_id") REFERENCES "public"."spend_budget"("budget_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "spend_budget" ADD CONSTRAINT "spend_budget_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "spend_budget" ADD CONSTRAINT "spend_budget_key_id_api_key_key_id_fk" FOREIGN KEY ("key_id") REFERENCES "public"."api_key"("key_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_quote" ADD CONSTRAINT "task_quote_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "spend_budget_tenant" ON "spend_budget" USING btree ("tenant_id") WHERE "spend_budget"."key_id" IS NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "spend_budget_key" ON "spend_budget" USING btree ("key_id") WHERE "spend_budget"."key_id" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "idx_task_quote_expires" ON "task_quote" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "idx_task_api_key_created" ON "generation_task" USING btree ("api_key_id","created_at") WHERE "generation_task"."api_key_id" IS NOT NULL;--> statement-breakpoint
ALTER TABLE "webhook_event" ADD CONSTRAINT "webhook_event_type_check" CHECK ("webhook_event"."event_type" IN ('task.succeeded', 'task.failed', 'task.cancelled', 'task.needs_attention', 'task.output_at_risk', 'task.thumbnail_ready', 'tenant.budget_threshold'));