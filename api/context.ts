// What the HTTP layer is built from. One object, passed to createApp().
import type { Db } from '../db/client';
import type { Logger } from '../observability/logger';
import type { Metrics } from '../observability/metrics';
import type { ProviderAdapter } from '../providers/types';
import type { ObjectStorage } from '../storage/s3';
import type { GenerationFacade } from '../temporal/facade';
import type { Admission } from './admission';

export interface ApiContext {
  readonly db: Db;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly facade: GenerationFacade;
  readonly admission: Admission;
  readonly providers: Readonly<Record<string, ProviderAdapter>>;
  readonly storage: ObjectStorage;
  readonly settings: {
    readonly region: string;
    readonly fenceScope: string;
    readonly bodyLimit: string;
    readonly presignTtlSeconds: number;
  };
}
