-- pgbench baseline for `npm run bench -- admission`: the create transaction of
-- api/tasks.service.ts createTask(), statement for statement, without HTTP, Node or drizzle:
-- fence share lock, task insert with its unique (tenant, Idempotency-Key), credit reserve with
-- the account CAS, reserve ledger row, outbox row, first transition.
-- Variables (set by bench/lib/pgbench.ts with -D): tenants = '{uuid,...}', ntenants, scope, region, epoch.
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
UPDATE credit_account SET reserved = reserved + 0.5, version = version + 1, updated_at = now()
  WHERE tenant_id = (:tenants::uuid[])[:t] AND balance - reserved >= 0.5
  RETURNING version;
INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, note)
  VALUES (gen_random_uuid(), (:tenants::uuid[])[:t], :task_id, 'task:' || :task_id::text || ':' || 'reserve', 'RESERVE', 0.5, :region, :epoch, NULL)
  ON CONFLICT (business_key) DO NOTHING
  RETURNING entry_id;
INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, schema_version, home_region, write_epoch)
  VALUES (gen_random_uuid(), 'generation_task', :task_id, 'GenerationTaskCreated',
    json_build_object('task_id', :task_id::uuid, 'tenant_id', (:tenants::uuid[])[:t], 'provider', 'replicate')::jsonb, 1, :region, :epoch);
INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
  VALUES (:task_id, NULL, 'QUEUED', NULL, 0, 'api.create', 'tenant:' || (:tenants::uuid[])[:t], :region, :epoch);
COMMIT;
