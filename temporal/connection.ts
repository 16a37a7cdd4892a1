// Temporal client connection, built the same way by the API, the worker's relay and the CLI.
import { Client, Connection, type WorkflowClientInterceptor } from '@temporalio/client';

export interface TemporalSettings {
  readonly address: string;
  readonly namespace: string;
  /** Workflow client interceptors (observability/tracing.ts: a start joins the caller's trace). */
  readonly interceptors?: readonly WorkflowClientInterceptor[];
}

export async function connectClient(settings: TemporalSettings): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ address: settings.address, connectTimeout: '5s' });
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
