CREATE TABLE "tenant_attention" (
	"attention_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"kind" text NOT NULL,
	"subject_id" text NOT NULL,
	"detail" jsonb,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"resolved_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "webhook_attempt" (
	"attempt_id" bigserial PRIMARY KEY NOT NULL,
	"delivery_id" uuid NOT NULL,
	"attempt_no" integer NOT NULL,
	"url" text NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"latency_ms" integer NOT NULL,
	"succeeded" boolean NOT NULL,
	"response_status" integer,
	"response_excerpt" text,
	"error" text
);
--> statement-breakpoint
CREATE TABLE "webhook_delivery" (
	"delivery_id" uuid PRIMARY KEY NOT NULL,
	"event_id" uuid NOT NULL,
	"tenant_id" uuid NOT NULL,
	"endpoint_id" uuid,
	"url" text,
	"target_key" text NOT NULL,
	"state" text DEFAULT 'pending' NOT NULL,
	"attempt_count" integer DEFAULT 0 NOT NULL,
	"schedule_step" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"lease_until" timestamp with time zone,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"delivered_at" timestamp with time zone,
	CONSTRAINT "webhook_delivery_state_check" CHECK ("webhook_delivery"."state" IN ('pending', 'succeeded', 'failed', 'cancelled'))
);
--> statement-breakpoint
CREATE TABLE "webhook_endpoint" (
	"endpoint_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"url" text NOT NULL,
	"description" text,
	"events" text[],
	"enabled" boolean DEFAULT true NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp with time zone,
	"failing_since" timestamp with time zone,
	"disabled_at" timestamp with time zone,
	"disabled_reason" text
);
--> statement-breakpoint
CREATE TABLE "webhook_endpoint_secret" (
	"secret_id" uuid PRIMARY KEY NOT NULL,
	"endpoint_id" uuid NOT NULL,
	"sealed" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "webhook_event" (
	"event_id" uuid PRIMARY KEY NOT NULL,
	"tenant_id" uuid NOT NULL,
	"task_id" uuid NOT NULL,
	"event_type" text NOT NULL,
	"status" text NOT NULL,
	"status_version" bigint NOT NULL,
	"data" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "webhook_event_type_check" CHECK ("webhook_event"."event_type" IN ('task.succeeded', 'task.failed', 'task.cancelled', 'task.needs_attention', 'task.output_at_risk'))
);
--> statement-breakpoint
ALTER TABLE "tenant_attention" ADD CONSTRAINT "tenant_attention_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_attempt" ADD CONSTRAINT "webhook_attempt_delivery_id_webhook_delivery_delivery_id_fk" FOREIGN KEY ("delivery_id") REFERENCES "public"."webhook_delivery"("delivery_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_delivery" ADD CONSTRAINT "webhook_delivery_event_id_webhook_event_event_id_fk" FOREIGN KEY ("event_id") REFERENCES "public"."webhook_event"("event_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_delivery" ADD CONSTRAINT "webhook_delivery_endpoint_id_webhook_endpoint_endpoint_id_fk" FOREIGN KEY ("endpoint_id") REFERENCES "public"."webhook_endpoint"("endpoint_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_endpoint" ADD CONSTRAINT "webhook_endpoint_tenant_id_tenant_tenant_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenant"("tenant_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_endpoint_secret" ADD CONSTRAINT "webhook_endpoint_secret_endpoint_id_webhook_endpoint_endpoint_id_fk" FOREIGN KEY ("endpoint_id") REFERENCES "public"."webhook_endpoint"("endpoint_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_event" ADD CONSTRAINT "webhook_event_task_id_generation_task_task_id_fk" FOREIGN KEY ("task_id") REFERENCES "public"."generation_task"("task_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "idx_tenant_attention_open" ON "tenant_attention" USING btree ("tenant_id","created_at") WHERE "tenant_attention"."resolved_at" IS NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_attempt_delivery_no" ON "webhook_attempt" USING btree ("delivery_id","attempt_no");--> statement-breakpoint
CREATE INDEX "idx_webhook_delivery_due" ON "webhook_delivery" USING btree ("next_attempt_at") WHERE "webhook_delivery"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "idx_webhook_delivery_target_pending" ON "webhook_delivery" USING btree ("target_key") WHERE "webhook_delivery"."state" = 'pending';--> statement-breakpoint
CREATE INDEX "idx_webhook_delivery_endpoint" ON "webhook_delivery" USING btree ("endpoint_id","created_at");--> statement-breakpoint
CREATE INDEX "idx_webhook_delivery_event" ON "webhook_delivery" USING btree ("event_id");--> statement-breakpoint
CREATE INDEX "idx_webhook_endpoint_tenant" ON "webhook_endpoint" USING btree ("tenant_id","created_at") WHERE "webhook_endpoint"."deleted_at" IS NULL;--> statement-breakpoint
CREATE INDEX "idx_webhook_secret_endpoint" ON "webhook_endpoint_secret" USING btree ("endpoint_id");--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_event_task_version" ON "webhook_event" USING btree ("task_id","status_version");--> statement-breakpoint
-- Hand-written: the webhook event of a transition is written by the transition's own INSERT
-- (docs/decisions/0018-tenant-webhooks.md). Whatever writes a task_transition row (db/tasks.ts,
-- settlement, an operator) writes its event and its deliveries in the same transaction; if they
-- cannot be written, the transition is rolled back with them. Only the statuses tenants hear
-- about make an event. The data is frozen here, from the task row this transaction just wrote.
CREATE FUNCTION "vidorch_record_webhook_event"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	t "generation_task"%ROWTYPE;
	ev uuid := gen_random_uuid();
	etype text;
	task_url text;
BEGIN
	etype := CASE NEW.to_status
		WHEN 'SUCCEEDED' THEN 'task.succeeded'
		WHEN 'FAILED' THEN 'task.failed'
		WHEN 'CANCELLED' THEN 'task.cancelled'
		WHEN 'MANUAL_REVIEW' THEN 'task.needs_attention'
		WHEN 'OUTPUT_AT_RISK' THEN 'task.output_at_risk'
	END;
	IF etype IS NULL THEN
		RETURN NULL;
	END IF;
	SELECT * INTO STRICT t FROM "generation_task" WHERE "task_id" = NEW.task_id;
	INSERT INTO "webhook_event" ("event_id", "tenant_id", "task_id", "event_type", "status", "status_version", "data", "created_at")
	VALUES (ev, t.tenant_id, t.task_id, etype, NEW.to_status, NEW.to_version, jsonb_build_object(
		'task_id', t.task_id,
		'status', NEW.to_status,
		'status_version', NEW.to_version,
		'previous_status', NEW.from_status,
		'occurred_at', to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
		'model', t.request->>'model',
		'metadata', COALESCE(t.request->'metadata', '{}'::jsonb),
		'settled_amount', t.settled_amount::text,
		'failure', CASE WHEN t.failure_code IS NULL THEN NULL ELSE jsonb_build_object('code', t.failure_code, 'message', t.failure_message) END,
		'output', CASE WHEN NEW.to_status <> 'SUCCEEDED' THEN NULL ELSE (
			SELECT jsonb_build_object('sha256', a.sha256, 'size_bytes', a.size_bytes, 'content_type', a.content_type, 'media', a.media_info)
			FROM "asset" a WHERE a.task_id = t.task_id AND a.kind = 'video') END
	), NEW.created_at);
	INSERT INTO "webhook_delivery" ("delivery_id", "event_id", "tenant_id", "endpoint_id", "url", "target_key", "next_attempt_at")
	SELECT gen_random_uuid(), ev, t.tenant_id, e.endpoint_id, NULL, 'endpoint:' || e.endpoint_id, now()
	FROM "webhook_endpoint" e
	WHERE e.tenant_id = t.tenant_id AND e.enabled AND e.deleted_at IS NULL AND (e.events IS NULL OR etype = ANY (e.events));
	task_url := t.request->>'webhook_url';
	IF task_url IS NOT NULL THEN
		INSERT INTO "webhook_delivery" ("delivery_id", "event_id", "tenant_id", "endpoint_id", "url", "target_key", "next_attempt_at")
		VALUES (gen_random_uuid(), ev, t.tenant_id, NULL, task_url, 'task-url:' || COALESCE(substring(task_url from '^[A-Za-z]+://[^/?#]+'), task_url), now());
	END IF;
	RETURN NULL;
END
$$;--> statement-breakpoint
CREATE TRIGGER "task_transition_webhook_event" AFTER INSERT ON "task_transition" FOR EACH ROW EXECUTE FUNCTION "vidorch_record_webhook_event"();
