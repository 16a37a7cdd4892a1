-- pgbench variant for `npm run bench -- admission --cas-last`: admission-tx.sql with the credit
-- account CAS moved to the last statement before COMMIT, so the tenant's account row (the one
-- row every create of a tenant updates) is locked for one round trip instead of four. Same
-- statements, same rows; measures the proposed reordering of api/tasks.service.ts createTask().
\set t random(1, :ntenants)
BEGIN;
SELECT active_region, write_epoch FROM region_write_fence WHERE resource_scope = :scope FOR SHARE;
INSERT INTO generation_task (task_id, tenant_id, project_id, home_region, write_epoch, status, idempotency_key,
    reserved_amount, request_hash, request, provider, provider_model, priority)
  VALUES (gen_random_uuid(), (:tenants::uuid[])[:t], (:tenants::uuid[])[:t], :region, :epoch, 'QUEUED', 'pgb-' || gen_random_uuid(),
    0.5, md5(random()::text) || md5(random()::text),
    '{"model":"minimax/video-01","prompt":"bench admission","duration_seconds":1,"resolution":"480p","priority":0}',
    'replicate', 'minimax/video-01', 0)
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
  RETURNING task_id \gset
INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, note)
  VALUES (gen_random_uuid(), (:tenants::uuid[])[:t], :task_id, 'task:' || :task_id::text || ':' || 'reserve', 'RESERVE', 0.5, :region, :epoch, NULL)
  ON CONFLICT (business_key) DO NOTHING
  RETURNING entry_id;
INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, schema_version, home_region, write_epoch)
  VALUES (gen_random_uuid(), 'generation_task', :task_id, 'GenerationTaskCreated',
    json_build_object('task_id', :task_id::uuid, 'tenant_id', (:tenants::uuid[])[:t], 'provider', 'replicate')::jsonb, 1, :region, :epoch);
INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
  VALUES (:task_id, NULL, 'QUEUED', NULL, 0, 'api.create', 'tenant:' || (:tenants::uuid[])[:t], :region, :epoch);
UPDATE credit_account SET reserved = reserved + 0.5, version = version + 1, updated_at = now()
  WHERE tenant_id = (:tenants::uuid[])[:t] AND balance - reserved >= 0.5
  RETURNING version;
COMMIT;
