// Temporal client connection, built the same way by the API, the worker's relay and the CLI.
import { Client, Connection, type TLSConfig, type WorkflowClientInterceptor } from '@temporalio/client';

/**
 * How to reach Temporal's frontend: what `Connection.connect` (the API, the CLI, the worker's
 * client) and the worker's `NativeConnection.connect` both take, built once from the settings by
 * config/connections.ts temporalConnection, so the processes cannot reach it differently.
 */
export interface TemporalConnectionOptions {
  readonly address: string;
  /** false: plaintext (production allows it only toward loopback, a sidecar). */
  readonly tls: TLSConfig | false;
  /** A Temporal Cloud API key, sent as `Authorization: Bearer` on every call. */
  readonly apiKey?: string;
}

export interface TemporalSettings {
  readonly connection: TemporalConnectionOptions;
  readonly namespace: string;
  /** Workflow client interceptors (observability/tracing.ts: a start joins the caller's trace). */
  readonly interceptors?: readonly WorkflowClientInterceptor[];
}

export async function connectClient(settings: TemporalSettings): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ ...settings.connection, connectTimeout: '5s' });
  const client = new Client({ connection, namespace: settings.namespace, interceptors: { workflow: [...(settings.interceptors ?? [])] } });
  return { client, close: () => connection.close() };
}

/**
 * A client that connects on first use and again after a failure, so that an API started while
 * Temporal is down still admits tasks (the outbox relay starts them later).
 */
export function lazyClient(settings: TemporalSettings): { get(): Promise<Client>; close(): Promise<void> } {
  let pending: Promise<{ client: Client; close(): Promise<void> }> | null = null;
  return {
    async get() {
      if (!pending) {
        pending = connectClient(settings);
        pending.catch(() => {
          pending = null;
        });
      }
      return (await pending).client;
    },
    async close() {
      if (pending) await (await pending.catch(() => null))?.close();
      pending = null;
    },
  };
}
