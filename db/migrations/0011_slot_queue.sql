CREATE TABLE "slot_wait" (
	"attempt_id" uuid PRIMARY KEY NOT NULL,
	"task_id" uuid NOT NULL,
	"provider" text NOT NULL,
	"tenant_id" uuid NOT NULL,
	"priority" integer NOT NULL,
	"since" timestamp with time zone DEFAULT now() NOT NULL,
	"weight" integer DEFAULT 1 NOT NULL,
	"tenant_provider_cap" integer,
	"tenant_total_cap" integer,
	"granted_at" timestamp with time zone,
	"reason" text,
	CONSTRAINT "slot_wait_priority_check" CHECK ("slot_wait"."priority" BETWEEN 0 AND 9),
	CONSTRAINT "slot_wait_weight_check" CHECK ("slot_wait"."weight" >= 1)
);
--> statement-breakpoint
CREATE TABLE "tenant_capacity" (
	"tenant_id" uuid NOT NULL,
	"provider" text NOT NULL,
	"max_in_flight" integer,
	"weight" integer,
	"reason" text,
	"updated_by" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "tenant_capacity_tenant_id_provider_pk" PRIMARY KEY("tenant_id","provider"),
	CONSTRAINT "tenant_capacity_max_in_flight_check" CHECK ("tenant_capacity"."max_in_flight" IS NULL OR "tenant_capacity"."max_in_flight" >= 0),
	CONSTRAINT "tenant_capacity_weight_check" CHECK ("tenant_capacity"."weight" IS NULL OR "tenant_capacity"."weight" >= 1)
);
--> statement-breakpoint
ALTER TABLE "provider_control" ADD COLUMN "queue_limit" integer;--> statement-breakpoint
ALTER TABLE "provider_control" ADD COLUMN "queue_policy" text;--> statement-breakpoint
ALTER TABLE "provider_control" ADD COLUMN "queue_aging_ms" integer;--> statement-breakpoint
ALTER TABLE "slot_wait" ADD CONSTRAINT "slot_wait_attempt_id_task_attempt_attempt_id_fk" FOREIGN KEY ("attempt_id") REFERENCES "public"."task_attempt"("attempt_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "slot_wait" ADD CONSTRAINT "slot_wait_task_id_generation_task_task_id_fk" FOREIGN KEY ("task_id") REFERENCES "public"."generation_task"("task_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "tenant_capacity" ADD CONSTRAINT "tenant_capacity_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "idx_slot_wait_provider" ON "slot_wait" USING btree ("provider","granted_at");--> statement-breakpoint
CREATE INDEX "idx_slot_wait_task" ON "slot_wait" USING btree ("task_id");