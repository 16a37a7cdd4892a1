ALTER TABLE "webhook_event" DROP CONSTRAINT "webhook_event_type_check";--> statement-breakpoint
DROP INDEX "webhook_event_task_version";--> statement-breakpoint
CREATE UNIQUE INDEX "webhook_event_task_version" ON "webhook_event" USING btree ("task_id","status_version","event_type");--> statement-breakpoint
ALTER TABLE "webhook_event" ADD CONSTRAINT "webhook_event_type_check" CHECK ("webhook_event"."event_type" IN ('task.succeeded', 'task.failed', 'task.cancelled', 'task.needs_attention', 'task.output_at_risk', 'task.thumbnail_ready'));-- Hand-written: `task.thumbnail_ready` (docs/webhooks.md, docs/decisions/0036-thumbnail-off-the-path.md).
-- The thumbnail is made after SUCCEEDED (activities/thumbnail.ts), so it has no transition of its
-- own; its asset row's INSERT writes the event and its deliveries in the same transaction, the way
-- a transition's INSERT does (0009, 0014): no thumbnail row without its event. The row is
-- unique per task and kind, so a task makes this event at most once. The event carries the task's
-- status and version when the thumbnail was recorded (SUCCEEDED, the task.succeeded event's
-- version: the index above now allows one event per type and version) and previous_status null:
-- it is not a status change. The fan-out is 0014's, to the endpoints subscribed to the type and
-- the task's own webhook_url.
CREATE FUNCTION "vidorch_record_thumbnail_event"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	t "generation_task"%ROWTYPE;
	ev uuid := gen_random_uuid();
	etype text := 'task.thumbnail_ready';
	task_url text;
BEGIN
	SELECT * INTO STRICT t FROM "generation_task" WHERE "task_id" = NEW.task_id;
	INSERT INTO "webhook_event" ("event_id", "tenant_id", "task_id", "event_type", "status", "status_version", "data", "created_at")
	VALUES (ev, t.tenant_id, t.task_id, etype, t.status, t.status_version, jsonb_build_object(
		'task_id', t.task_id,
		'status', t.status,
		'status_version', t.status_version,
		'previous_status', NULL,
		'occurred_at', to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
		'model', t.request->>'model',
		'metadata', COALESCE(t.request->'metadata', '{}'::jsonb),
		'settled_amount', t.settled_amount::text,
		'failure', NULL,
		'output', (
			SELECT jsonb_build_object('sha256', a.sha256, 'size_bytes', a.size_bytes, 'content_type', a.content_type, 'media', a.media_info)
			FROM "asset" a WHERE a.task_id = t.task_id AND a.kind = 'video'),
		'thumbnail', jsonb_build_object('sha256', NEW.sha256, 'size_bytes', NEW.size_bytes, 'content_type', NEW.content_type)
	), NEW.created_at);
	INSERT INTO "webhook_delivery" ("delivery_id", "event_id", "tenant_id", "endpoint_id", "url", "target_key", "next_attempt_at")
	SELECT gen_random_uuid(), ev, t.tenant_id, e.endpoint_id, NULL, 'endpoint:' || e.endpoint_id, now()
	FROM "webhook_endpoint" e
	WHERE e.tenant_id = t.tenant_id AND e.enabled AND e.deleted_at IS NULL AND (e.events IS NULL OR etype = ANY (e.events));
	task_url := t.request->>'webhook_url';
	IF task_url IS NOT NULL THEN
		INSERT INTO "webhook_delivery" ("delivery_id", "event_id", "tenant_id", "endpoint_id", "url", "target_key", "next_attempt_at")
		VALUES (gen_random_uuid(), ev, t.tenant_id, NULL, task_url, 'task-url:' || t.tenant_id || ':' || COALESCE(substring(task_url from '^[A-Za-z]+://[^/?#]+'), task_url), now());
	END IF;
	RETURN NULL;
END
$$;--> statement-breakpoint
CREATE TRIGGER "asset_thumbnail_webhook_event" AFTER INSERT ON "asset" FOR EACH ROW WHEN (NEW."kind" = 'thumbnail') EXECUTE FUNCTION "vidorch_record_thumbnail_event"();
