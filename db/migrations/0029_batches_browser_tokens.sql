CREATE TABLE "browser_token_revocation" (
	"token_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"revoked_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "task_batch" (
	"batch_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"idempotency_key" text NOT NULL,
	"request_hash" text NOT NULL,
	"item_count" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "task_batch_item" (
	"batch_id" uuid NOT NULL,
	"item_no" integer NOT NULL,
	"result" jsonb NOT NULL,
	CONSTRAINT "task_batch_item_batch_id_item_no_pk" PRIMARY KEY("batch_id","item_no")
);
--> statement-breakpoint
ALTER TABLE "browser_token_revocation" ADD CONSTRAINT "browser_token_revocation_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_batch" ADD CONSTRAINT "task_batch_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "task_batch_item" ADD CONSTRAINT "task_batch_item_batch_id_task_batch_batch_id_fk" FOREIGN KEY ("batch_id") REFERENCES "public"."task_batch"("batch_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "task_batch_tenant_idempotency_key" ON "task_batch" USING btree ("tenant_id","idempotency_key");