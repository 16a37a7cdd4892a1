// API keys at the edge (docs/security.md "API keys"): who a bearer is, at as little cost to the
// shared Postgres pool as that allows, and what a revocation ends.
//
// - A lookup's answer is kept AUTH_CACHE_TTL_MS (valid and unknown keys, AUTH_CACHE_MAX_KEYS of
//   each, least recently used dropped first). An answer counts only while the event hub's LISTEN
//   connection (api/event-hub.ts) is up and has been since the answer was read: that connection
//   hears every issue and revocation (db/tenants.ts API_KEYS_CHANNEL), which evicts the key at
//   once. A lookup that overlapped a key change is not kept.
// - A key this process has not seen valid costs its source address one point of
//   AUTH_LOOKUPS_PER_SOURCE_PER_SECOND before Postgres is asked; over it: 429. A key seen valid
//   and not revoked since is looked up again when its answer expires, without a point, so a
//   tenant behind the same address as a flood of random bearers keeps working.
// - The open event streams of a key end when it is revoked: at once, or when its grace ends. The
//   revocations missed while the LISTEN connection was down are read when it is back.
import ipaddr from 'ipaddr.js';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { Db } from '../db/client';
import { findValidApiKey, hashApiKey, keyRevocations, type ValidApiKey } from '../db/tenants';
import type { Logger } from '../observability/logger';
import type { EventHub, KeyNotice } from './event-hub';
import { HttpProblem } from './problem';

export interface ApiKeyAuthSettings {
  /** How long a lookup's answer is used without asking Postgres again. */
  readonly cacheTtlMs: number;
  /** Keys remembered: valid ones, and as many unknown ones. */
  readonly cacheMaxKeys: number;
  /** Lookups of keys this process has not seen valid, per source address (IPv6: per /64) per second. */
  readonly lookupsPerSourcePerSecond: number;
}

export interface ApiKeyAuth {
  /** The key's tenant, or null (401). Throws a 429 problem when `source` is over its lookup limit. */
  authenticate(key: string, source: string): Promise<ValidApiKey | null>;
  /** Calls `onRevoked` once when the key stops being valid (revoked now, or its grace ends). Returns the unsubscribe. */
  onRevoked(key: ValidApiKey, onRevoked: () => void): () => void;
}

interface Answer {
  /** Null: no valid key has this hash. */
  readonly key: ValidApiKey | null;
  /** Used without a lookup until then (ms since the epoch); 0: known, to be looked up again. */
  readonly until: number;
  /** The hub's connection it was read under (EventHub.connects). */
  readonly connection: number;
}

/** An open event stream of a key: when it is to end (its key's revocation), and how. */
interface OpenStream {
  at: Date | null;
  timer: NodeJS.Timeout | null;
  readonly end: () => void;
}

/** setTimeout's longest delay; a later revocation is waited for in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** The per-source key of an address: an IPv4 address (IPv4-mapped IPv6 too), or an IPv6 /64 (one host often holds a whole /64). */
function sourceKey(address: string): string {
  if (!ipaddr.isValid(address)) return address;
  const ip = ipaddr.process(address);
  if (ip.kind() === 'ipv4') return ip.toString();
  const parts = (ip as ipaddr.IPv6).parts.slice(0, 4).map((p) => p.toString(16));
  return `${parts.join(':')}::/64`;
}

export function createApiKeyAuth(deps: { db: Db; hub: EventHub; logger: Logger; settings: ApiKeyAuthSettings }): ApiKeyAuth {
  const { db, hub, logger, settings } = deps;
  const valid = new Map<string, Answer>();
  const unknown = new Map<string, Answer>();
  const hashOfKeyId = new Map<string, string>();
  const inFlight = new Map<string, Promise<ValidApiKey | null>>();
  /** Revocations heard lately (key id → when it takes effect), for a stream opened on an answer read just before. */
  const revoked = new Map<string, Date>();
  const streams = new Map<string, Set<OpenStream>>();
  /** Bumped by every key notice: a lookup that overlapped one is not kept. */
  let notices = 0;
  let subscribed = false;
  const limiter = new RateLimiterMemory({ keyPrefix: 'vidorch:auth-lookup', points: settings.lookupsPerSourcePerSecond, duration: 1 });

  const remember = (map: Map<string, Answer>, hash: string, answer: Answer) => {
    map.delete(hash);
    map.set(hash, answer);
    if (answer.key) hashOfKeyId.set(answer.key.keyId, hash);
    while (map.size > settings.cacheMaxKeys) {
      const [oldest, dropped] = map.entries().next().value!;
      map.delete(oldest);
      if (dropped.key) hashOfKeyId.delete(dropped.key.keyId);
    }
  };
  const forgetValid = (hash: string) => {
    const answer = valid.get(hash);
    valid.delete(hash);
    if (answer?.key) hashOfKeyId.delete(answer.key.keyId);
  };
  const fresh = (a: Answer, now: number) =>
    now < a.until && a.connection === hub.connects() && hub.listening() && (!a.key?.revokedAt || now < a.key.revokedAt.getTime());

  /** Ends the stream at `at`, unless it is due to end sooner already. */
  function endAt(stream: OpenStream, at: Date) {
    if (stream.at && stream.at <= at) return;
    stream.at = at;
    arm(stream);
  }
  function arm(stream: OpenStream) {
    if (stream.timer) clearTimeout(stream.timer);
    const wait = stream.at!.getTime() - Date.now();
    stream.timer = setTimeout(
      () => {
        stream.timer = null;
        if (wait > MAX_TIMER_MS) arm(stream);
        else stream.end();
      },
      Math.max(0, Math.min(wait, MAX_TIMER_MS)),
    );
    stream.timer.unref();
  }

  function applyRevocation(keyId: string, at: Date) {
    revoked.delete(keyId);
    revoked.set(keyId, at);
    while (revoked.size > settings.cacheMaxKeys) revoked.delete(revoked.keys().next().value!);
    const hash = hashOfKeyId.get(keyId);
    const answer = hash ? valid.get(hash) : undefined;
    if (hash && answer?.key) {
      // Revoked now: no longer a known key. Revoked later: still known, read again for its new revoked_at.
      if (at.getTime() <= Date.now()) forgetValid(hash);
      else remember(valid, hash, { ...answer, until: 0 });
    }
    for (const stream of streams.get(keyId) ?? []) endAt(stream, at);
  }

  async function recheckStreams() {
    try {
      for (const r of await keyRevocations(db, [...streams.keys()])) applyRevocation(r.keyId, r.revokedAt);
    } catch (err) {
      logger.warn({ err }, 'API key revocations could not be read after the LISTEN connection came back; open streams are checked at its next connect');
    }
  }

  function onNotice(n: KeyNotice) {
    notices += 1;
    if (n.kind === 'revoked') applyRevocation(n.keyId, n.revokedAt);
    else if (n.kind === 'issued') unknown.clear();
    else void recheckStreams();
  }

  async function lookup(hash: string): Promise<ValidApiKey | null> {
    const before = { notices, connection: hub.connects(), listening: hub.listening() };
    const key = await findValidApiKey(db, hash);
    const keep = before.listening && hub.listening() && before.notices === notices && before.connection === hub.connects();
    const answer: Answer = { key, until: keep ? Date.now() + settings.cacheTtlMs : 0, connection: before.connection };
    if (key) {
      unknown.delete(hash);
      remember(valid, hash, answer);
    } else {
      forgetValid(hash);
      if (keep) remember(unknown, hash, answer);
    }
    return key;
  }

  async function consumeLookup(source: string): Promise<void> {
    try {
      await limiter.consume(sourceKey(source), 1);
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw rejection;
      throw new HttpProblem(
        429,
        'rate-limited',
        'Too many requests with unknown API keys',
        `at most ${settings.lookupsPerSourcePerSecond} API keys not seen before are looked up per second per source address`,
        [],
        { 'Retry-After': String(Math.max(1, Math.ceil(rejection.msBeforeNext / 1000))) },
      );
    }
  }

  return {
    async authenticate(key, source) {
      if (!subscribed) {
        // The first request starts the hub's connection: from then on answers can be kept.
        subscribed = true;
        hub.watchKeys(onNotice);
      }
      const hash = hashApiKey(key);
      const now = Date.now();
      const known = valid.get(hash);
      if (known && fresh(known, now)) {
        remember(valid, hash, known);
        return known.key;
      }
      if (!known) {
        const nope = unknown.get(hash);
        if (nope && fresh(nope, now)) return null;
      }
      const pending = inFlight.get(hash);
      if (pending) return pending;
      if (!known) await consumeLookup(source);
      const p = lookup(hash).finally(() => inFlight.delete(hash));
      inFlight.set(hash, p);
      return p;
    },

    onRevoked(key, onRevoked) {
      let ended = false;
      const stream: OpenStream = {
        at: null,
        timer: null,
        end: () => {
          if (ended) return;
          ended = true;
          onRevoked();
        },
      };
      let set = streams.get(key.keyId);
      if (!set) streams.set(key.keyId, (set = new Set()));
      set.add(stream);
      const heard = revoked.get(key.keyId);
      const at = heard && key.revokedAt ? (heard < key.revokedAt ? heard : key.revokedAt) : (heard ?? key.revokedAt);
      if (at) endAt(stream, at);
      return () => {
        if (stream.timer) clearTimeout(stream.timer);
        set.delete(stream);
        if (set.size === 0 && streams.get(key.keyId) === set) streams.delete(key.keyId);
      };
    },
  };
}
