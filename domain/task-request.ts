// A task's request as accepted and stored (generation_task.request): api/tasks.schemas.ts
// createTaskBody validates it at the edge; everything after reads this shape.
import type { Resolution } from './catalog';

export interface TaskRequest {
  /** A catalog model: a provider's model id, or a model family. */
  readonly model: string;
  /** A pinned model's provider, or the tenant's preference within a family. */
  readonly provider?: string | undefined;
  readonly prompt: string;
  readonly duration_seconds: number;
  readonly resolution: Resolution;
  readonly input_image_url?: string | undefined;
  readonly priority: number;
  readonly deadline_seconds?: number | undefined;
  readonly metadata?: Readonly<Record<string, string>> | undefined;
  readonly project_id?: string | undefined;
  readonly webhook_url?: string | undefined;
  /** The quote the create cited (POST /v1/quotes): the reservation is at most its amount. */
  readonly quote_id?: string | undefined;
}
