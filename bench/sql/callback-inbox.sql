-- pgbench baseline for `npm run bench -- callbacks`: the single-row inbox insert of
-- db/inbox.ts recordProviderEvent(), deduped with ON CONFLICT DO NOTHING, with about one
-- insert in ten repeating an event id this client already stored (the benchmark's 10 %
-- duplicates). Variables (-D): attempts = '{uuid,...}', tasks = '{uuid,...}' (same order), n, region,
-- payload (the stored JSON of a typical callback, passed as a parameter like the API does).
\set d random(1, 10)
\set k random(1, 2000000000)
\set a random(1, :n)
\if :d = 1
\set k :client_id
\endif
INSERT INTO callback_inbox (inbox_id, provider, provider_job_id, provider_event_id, dedupe_key, event_type, payload,
    signature_valid, received_region, attempt_id, task_id, source, provider_updated_at)
  VALUES (gen_random_uuid(), 'replicate', 'pgbjob' || :a, 'msg_' || :d || '_' || :k, 'event' || ':' || 'msg_' || :d || '_' || :k, 'running',
    :payload::jsonb,
    true, :region, (:attempts::uuid[])[:a], (:tasks::uuid[])[:a], 'callback', now())
  ON CONFLICT (provider, dedupe_key) DO NOTHING
  RETURNING inbox_id;
