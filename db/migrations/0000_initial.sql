CREATE TABLE "api_key" (
	"key_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"key_hash" text NOT NULL,
	"key_prefix" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "api_key_key_hash_unique" UNIQUE("key_hash")
);
--> statement-breakpoint
CREATE TABLE "asset" (
	"asset_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"task_id" uuid NOT NULL,
	"attempt_id" uuid NOT NULL,
	"kind" text NOT NULL,
	"bucket" text NOT NULL,
	"region" text NOT NULL,
	"object_key" text NOT NULL,
	"sha256" text NOT NULL,
	"size_bytes" bigint NOT NULL,
	"content_type" text NOT NULL,
	"media_info" jsonb,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "asset_kind_check" CHECK ("asset"."kind" IN ('video', 'thumbnail'))
);
--> statement-breakpoint
CREATE TABLE "callback_inbox" (
	"inbox_id" uuid PRIMARY KEY NOT NULL,
	"provider" text NOT NULL,
	"provider_job_id" text NOT NULL,
	"provider_event_id" text,
	"dedupe_key" text NOT NULL,
	"event_type" text NOT NULL,
	"payload" jsonb NOT NULL,
	"signature_valid" boolean NOT NULL,
	"received_region" text NOT NULL,
	"received_at" timestamp with time zone DEFAULT now() NOT NULL,
	"processed_at" timestamp with time zone,
	"process_error" text,
	"attempt_id" uuid,
	"task_id" uuid,
	"source" text NOT NULL,
	"provider_updated_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "credit_account" (
	"tenant_id" uuid PRIMARY KEY NOT NULL,
	"balance" numeric(18, 6) DEFAULT '0' NOT NULL,
	"reserved" numeric(18, 6) DEFAULT '0' NOT NULL,
	"version" bigint DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "credit_account_reserved_nonneg" CHECK ("credit_account"."reserved" >= 0),
	CONSTRAINT "credit_account_reserved_within_balance" CHECK ("credit_account"."reserved" <= "credit_account"."balance")
);
--> statement-breakpoint
CREATE TABLE "credit_ledger" (
	"entry_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"task_id" uuid,
	"business_key" text NOT NULL,
	"entry_type" text NOT NULL,
	"amount" numeric(18, 6) NOT NULL,
	"region" text NOT NULL,
	"write_epoch" bigint NOT NULL,
	"note" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "credit_ledger_business_key_unique" UNIQUE("business_key"),
	CONSTRAINT "credit_ledger_amount_nonneg" CHECK ("credit_ledger"."amount" >= 0),
	CONSTRAINT "credit_ledger_entry_type_check" CHECK ("credit_ledger"."entry_type" IN ('GRANT', 'RESERVE', 'SETTLE', 'RELEASE', 'REFUND'))
);
--> statement-breakpoint
CREATE TABLE "generation_task" (
	"task_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"project_id" uuid NOT NULL,
	"home_region" text NOT NULL,
	"write_epoch" bigint NOT NULL,
	"status" text NOT NULL,
	"status_version" bigint DEFAULT 0 NOT NULL,
	"active_attempt_id" uuid,
	"idempotency_key" text NOT NULL,
	"reserved_amount" numeric(18, 6) NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"terminal_at" timestamp with time zone,
	"request_hash" text NOT NULL,
	"request" jsonb NOT NULL,
	"provider" text NOT NULL,
	"provider_model" text NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"settled_amount" numeric(18, 6),
	"failure_code" text,
	"failure_message" text,
	"cancel_requested_at" timestamp with time zone,
	CONSTRAINT "generation_task_status_check" CHECK ("generation_task"."status" IN ('QUEUED', 'DISPATCHING', 'SUBMITTING', 'SUBMIT_UNKNOWN', 'SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED', 'PROVIDER_SUCCEEDED', 'FETCHING_OUTPUT', 'OUTPUT_AT_RISK', 'PROCESSING_MEDIA', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'MANUAL_REVIEW')),
	CONSTRAINT "generation_task_reserved_nonneg" CHECK ("generation_task"."reserved_amount" >= 0)
);
--> statement-breakpoint
CREATE TABLE "ops_audit" (
	"audit_id" uuid PRIMARY KEY NOT NULL,
	"actor" text NOT NULL,
	"action" text NOT NULL,
	"target_type" text NOT NULL,
	"target_id" text NOT NULL,
	"reason" text NOT NULL,
	"detail" jsonb,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "outbox_event" (
	"event_id" uuid PRIMARY KEY NOT NULL,
	"aggregate_type" text NOT NULL,
	"aggregate_id" uuid NOT NULL,
	"event_type" text NOT NULL,
	"payload" jsonb NOT NULL,
	"schema_version" integer NOT NULL,
	"home_region" text NOT NULL,
	"write_epoch" bigint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"published_at" timestamp with time zone,
	"publish_attempts" integer DEFAULT 0 NOT NULL,
	"next_retry_at" timestamp with time zone,
	"last_error" text
);
--> statement-breakpoint
CREATE TABLE "region_write_fence" (
	"resource_scope" text PRIMARY KEY NOT NULL,
	"active_region" text NOT NULL,
	"write_epoch" bigint NOT NULL,
	"mode" text NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "region_write_fence_mode_check" CHECK ("region_write_fence"."mode" IN ('NORMAL', 'DEGRADED_NOTIFY', 'DEGRADED_PROVIDER', 'QUEUE_ONLY', 'RECONCILE_ONLY', 'READ_ONLY', 'MAINTENANCE'))
);
--> statement-breakpoint
CREATE TABLE "task_attempt" (
	"attempt_id" uuid PRIMARY KEY NOT NULL,
	"task_id" uuid NOT NULL,
	"attempt_no" integer NOT NULL,
	"provider" text NOT NULL,
	"provider_model" text NOT NULL,
	"provider_idempotency_key" text,
	"provider_job_id" text,
	"submit_state" text NOT NULL,
	"submit_started_at" timestamp with time zone,
	"submit_finished_at" timestamp with time zone,
	"unknown_since" timestamp with time zone,
	"next_poll_at" timestamp with time zone,
	"last_polled_at" timestamp with time zone,
	"output_deadline_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"provider_status" text,
	"provider_updated_at" timestamp with time zone,
	"output_url" text,
	"last_error" text,
	"provider_metrics" jsonb,
	"status_version" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "task_attempt_submit_state_check" CHECK ("task_attempt"."submit_state" IN ('PREPARED', 'SUBMITTING', 'SUBMITTED', 'SUBMIT_UNKNOWN', 'REJECTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'))
);
--> statement-breakpoint
CREATE TABLE "task_transition" (
	"transition_id" bigserial PRIMARY KEY NOT NULL,
	"task_id" uuid NOT NULL,
	"from_status" text,
	"to_status" text NOT NULL,
	"from_version" bigint,
	"to_version" bigint NOT NULL,
	"source_event" text NOT NULL,
	"actor" text NOT NULL,
	"attempt_id" uuid,
	"detail" jsonb,
	"region" text NOT NULL,
	"write_epoch" bigint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "tenant" (
	"tenant_id" uuid PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "tenant_name_unique" UNIQUE("name")
);
--> statement-breakpoint
ALTER TABLE "api_key" ADD CONSTRAINT "api_key_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "asset" ADD CONSTRAINT "asset_task_id_generation_task_task_id_fk" FOREIGN KEY ("task_id") REFERENCES "public"."generation_task"("task_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_account" ADD CONSTRAINT "credit_account_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "credit_ledger" ADD CONSTRAINT "credit_ledger_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "generation_task" ADD CONSTRAINT "generation_task_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_attempt" ADD CONSTRAINT "task_attempt_task_id_generation_task_task_id_fk" FOREIGN KEY ("task_id") REFERENCES "public"."generation_task"("task_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_transition" ADD CONSTRAINT "task_transition_task_id_generation_task_task_id_fk" FOREIGN KEY ("task_id") REFERENCES "public"."generation_task"("task_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "idx_api_key_tenant" ON "api_key" USING btree ("tenant_id");--> statement-breakpoint
CREATE UNIQUE INDEX "asset_bucket_object_key" ON "asset" USING btree ("bucket","object_key");--> statement-breakpoint
CREATE UNIQUE INDEX "asset_task_kind" ON "asset" USING btree ("task_id","kind");--> statement-breakpoint
CREATE UNIQUE INDEX "callback_inbox_provider_dedupe_key" ON "callback_inbox" USING btree ("provider","dedupe_key");--> statement-breakpoint
CREATE INDEX "idx_callback_unprocessed" ON "callback_inbox" USING btree ("received_at") WHERE "callback_inbox"."processed_at" IS NULL;--> statement-breakpoint
CREATE INDEX "idx_callback_task_unprocessed" ON "callback_inbox" USING btree ("task_id","received_at") WHERE "callback_inbox"."processed_at" IS NULL;--> statement-breakpoint
CREATE INDEX "idx_ledger_task" ON "credit_ledger" USING btree ("task_id");--> statement-breakpoint
CREATE INDEX "idx_ledger_tenant_created" ON "credit_ledger" USING btree ("tenant_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "generation_task_tenant_idempotency_key" ON "generation_task" USING btree ("tenant_id","idempotency_key");--> statement-breakpoint
CREATE INDEX "idx_task_non_terminal_updated" ON "generation_task" USING btree ("status","updated_at") WHERE "generation_task"."terminal_at" IS NULL;--> statement-breakpoint
CREATE INDEX "idx_task_tenant_created" ON "generation_task" USING btree ("tenant_id","created_at","task_id");--> statement-breakpoint
CREATE INDEX "idx_ops_audit_target" ON "ops_audit" USING btree ("target_type","target_id","created_at");--> statement-breakpoint
CREATE INDEX "idx_outbox_unpublished" ON "outbox_event" USING btree ("next_retry_at","created_at") WHERE "outbox_event"."published_at" IS NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "task_attempt_task_attempt_no" ON "task_attempt" USING btree ("task_id","attempt_no");--> statement-breakpoint
CREATE UNIQUE INDEX "task_attempt_provider_idempotency_key" ON "task_attempt" USING btree ("provider","provider_idempotency_key");--> statement-breakpoint
CREATE UNIQUE INDEX "task_attempt_provider_job_id" ON "task_attempt" USING btree ("provider","provider_job_id");--> statement-breakpoint
CREATE INDEX "idx_attempt_poll_due" ON "task_attempt" USING btree ("next_poll_at") WHERE "task_attempt"."submit_state" IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN');--> statement-breakpoint
CREATE UNIQUE INDEX "task_transition_task_version" ON "task_transition" USING btree ("task_id","to_version");