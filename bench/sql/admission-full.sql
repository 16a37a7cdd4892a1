-- pgbench reference for `npm run bench -- admission`: every Postgres round trip of one
-- successful POST /v1/tasks (api/auth.ts, api/tasks.handlers.ts, api/tasks.service.ts,
-- api/fast-path.ts), in order: API-key lookup, fence read, Idempotency-Key lookup, the create
-- transaction (as in admission-tx.sql), then marking the outbox row published after the
-- workflow start. What the API would reach if HTTP, Node, drizzle and Temporal cost nothing.
\set t random(1, :ntenants)
SELECT t.tenant_id, t.name FROM api_key k INNER JOIN tenant t ON t.tenant_id = k.tenant_id
  WHERE k.key_hash = md5('bench') || md5('key') AND k.revoked_at IS NULL;
SELECT resource_scope, active_region, write_epoch, mode, updated_at FROM region_write_fence WHERE resource_scope = :scope;
SELECT 'pgb-' || gen_random_uuid() AS idem_key \gset
SELECT * FROM generation_task WHERE tenant_id = (:tenants::uuid[])[:t] AND idempotency_key = :idem_key;
BEGIN;
SELECT active_region, write_epoch FROM region_write_fence WHERE resource_scope = :scope FOR SHARE;
INSERT INTO generation_task (task_id, tenant_id, project_id, home_region, write_epoch, status, idempotency_key,
    reserved_amount, request_hash, request, provider, provider_model, priority)
  VALUES (gen_random_uuid(), (:tenants::uuid[])[:t], (:tenants::uuid[])[:t], :region, :epoch, 'QUEUED', :idem_key,
    0.5, md5(random()::text) || md5(random()::text),
    '{"model":"minimax/video-01","prompt":"bench admission","duration_seconds":1,"resolution":"480p","priority":0}',
    'replicate', 'minimax/video-01', 0)
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
  RETURNING task_id \gset
UPDATE credit_account SET reserved = reserved + 0.5, version = version + 1, updated_at = now()
  WHERE tenant_id = (:tenants::uuid[])[:t] AND balance - reserved >= 0.5
  RETURNING version;
INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, note)
  VALUES (gen_random_uuid(), (:tenants::uuid[])[:t], :task_id, 'task:' || :task_id::text || ':' || 'reserve', 'RESERVE', 0.5, :region, :epoch, NULL)
  ON CONFLICT (business_key) DO NOTHING
  RETURNING entry_id;
INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, schema_version, home_region, write_epoch)
  VALUES (gen_random_uuid(), 'generation_task', :task_id, 'GenerationTaskCreated',
    json_build_object('task_id', :task_id::uuid, 'tenant_id', (:tenants::uuid[])[:t], 'provider', 'replicate')::jsonb, 1, :region, :epoch)
  RETURNING event_id \gset
INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
  VALUES (:task_id, NULL, 'QUEUED', NULL, 0, 'api.create', 'tenant:' || (:tenants::uuid[])[:t], :region, :epoch);
COMMIT;
UPDATE outbox_event SET published_at = now(), publish_attempts = publish_attempts + 1
  WHERE event_id = :event_id AND published_at IS NULL;
