-- pgbench baseline for `npm run bench -- admission`: the create transaction of
-- api/tasks.service.ts createTask(), statement for statement, without HTTP, Node or drizzle:
-- BEGIN, the one statement of db/task-admission.ts admitTask() (fence share lock, task insert with
-- its unique (tenant, Idempotency-Key), outbox row, first transition, reserve ledger row, account
-- CAS), COMMIT.
-- Variables (set by bench/lib/pgbench.ts with -D): tenants = '{uuid,...}', ntenants, scope, region, epoch.
\set t random(1, :ntenants)
BEGIN;
WITH fence AS (
    SELECT mode FROM region_write_fence WHERE resource_scope = :scope::text AND active_region = :region::text AND write_epoch = :epoch::bigint FOR SHARE
  ), task AS (
    INSERT INTO generation_task (task_id, tenant_id, project_id, home_region, write_epoch, status, idempotency_key,
        reserved_amount, request_hash, request, provider, provider_model, priority, deadline_at)
    SELECT gen_random_uuid(), (:tenants::uuid[])[:t::int], (:tenants::uuid[])[:t::int], :region::text, :epoch::bigint, 'QUEUED', 'pgb-' || gen_random_uuid(),
        0.5, md5(random()::text) || md5(random()::text),
        '{"model":"minimax/video-01","prompt":"bench admission","duration_seconds":1,"resolution":"480p","priority":0}'::jsonb,
        'replicate', 'minimax/video-01', 0, now() + make_interval(secs => 3600)
    FROM fence WHERE fence.mode = ANY ('{NORMAL,DEGRADED_NOTIFY,DEGRADED_PROVIDER,QUEUE_ONLY}'::text[])
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING *
  ), outbox AS (
    INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, schema_version, home_region, write_epoch)
    SELECT gen_random_uuid(), 'generation_task', task_id, 'GenerationTaskCreated',
        json_build_object('task_id', task_id, 'tenant_id', tenant_id, 'provider', 'replicate', 'priority', 0)::jsonb, 1, :region::text, :epoch::bigint
    FROM task
    RETURNING event_id
  ), transition AS (
    INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
    SELECT task_id, NULL, 'QUEUED', NULL::bigint, 0, 'api.create', 'tenant:' || tenant_id, :region::text, :epoch::bigint FROM task
  ), ledger AS (
    INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, note)
    SELECT gen_random_uuid(), tenant_id, task_id, 'task:' || task_id || ':' || 'reserve', 'RESERVE', 0.5, :region::text, :epoch::bigint, NULL FROM task
    ON CONFLICT (business_key) DO NOTHING
    RETURNING entry_id
  ), account AS (
    UPDATE credit_account SET reserved = reserved + 0.5, version = version + 1, updated_at = now()
    WHERE tenant_id = (:tenants::uuid[])[:t::int] AND balance - reserved >= 0.5 AND EXISTS (SELECT 1 FROM ledger)
    RETURNING version
  )
  SELECT EXISTS (SELECT 1 FROM fence) AS fence_held, (SELECT mode FROM fence) AS fence_mode, EXISTS (SELECT 1 FROM ledger) AS reserved, EXISTS (SELECT 1 FROM account) AS moved,
    (SELECT (balance - reserved)::text FROM credit_account WHERE tenant_id = (:tenants::uuid[])[:t::int]) AS available_credits,
    (SELECT event_id FROM outbox) AS event_id, task.*
  FROM (SELECT 1) AS one LEFT JOIN task ON true;
COMMIT;
