-- Hand-written: a task's own webhook_url is capped per tenant and origin, not per origin alone:
-- keyed by origin only, one tenant pointing many tasks at a slow shared host took the per-target
-- concurrency every other tenant's deliveries to that host needed (found in review). The same
-- function as 0009's otherwise. Deliveries already pending keep their key.
CREATE OR REPLACE FUNCTION "vidorch_record_webhook_event"() RETURNS trigger LANGUAGE plpgsql AS $$
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
		VALUES (gen_random_uuid(), ev, t.tenant_id, NULL, task_url, 'task-url:' || t.tenant_id || ':' || COALESCE(substring(task_url from '^[A-Za-z]+://[^/?#]+'), task_url), now());
	END IF;
	RETURN NULL;
END
$$;
