// Fault knobs of the simulator. POST /_sim/faults replaces the whole config; DELETE resets it.
import { z } from 'zod';
import { SubmitLog } from './submit-log';

export const SUBMIT_FAULTS = [
  'ok',
  /** Create the prediction, never answer. */
  'accept_then_hang',
  /** Create the prediction, answer after submit_delay_ms. */
  'answer_after_ms',
  /** Answer 500, create nothing. */
  'error_5xx_before_accept',
  /** Create the prediction, answer 502. */
  'error_5xx_after_accept',
  /** Answer 429 (with Retry-After: retry_after_s when set), create nothing. */
  'rate_limit',
  /** Create the prediction, then destroy the socket without answering. */
  'reset_after_accept',
] as const;
export type SubmitFault = (typeof SUBMIT_FAULTS)[number];

export const SIM_PROVIDERS = ['replicate', 'fal', 'runway', 'kling'] as const;
export type SimProvider = (typeof SIM_PROVIDERS)[number];

export const faultConfigSchema = z.strictObject({
  /** Apply the faults below only to these providers (default: all). */
  providers: z.array(z.enum(SIM_PROVIDERS)).optional(),
  /** Apply the submit fault to this share of submits only (0..1, default 1): seed 001's "70 % failure". */
  submit_fault_rate: z.number().min(0).max(1).optional(),
  callbacks: z.enum(['on', 'off']).optional(),
  /** Send each webhook event this many extra times, with the same webhook-id. */
  callback_duplicates: z.number().int().min(0).max(20).optional(),
  callback_delay_ms: z.number().int().min(0).max(600_000).optional(),
  /** Hold the 'start' event and send it after 'completed'. */
  callback_reorder: z.boolean().optional(),
  /** Sign webhooks with a secret the receiver does not know. */
  callback_wrong_key: z.boolean().optional(),
  submit: z.enum(SUBMIT_FAULTS).optional(),
  submit_delay_ms: z.number().int().min(0).max(600_000).optional(),
  retry_after_s: z.number().int().min(0).optional(),
  /** Apply the submit fault to the next N submits only, then behave as 'ok'. */
  submit_fault_count: z.number().int().min(0).optional(),
  /** GET /v1/predictions/:id */
  status: z.enum(['ok', 'error_5xx']).optional(),
  /** GET /v1/predictions (listing) */
  list: z.enum(['ok', 'error_5xx']).optional(),
  /** Replicate output files: 'not_media' serves bytes that are no video (the media check must refuse them). */
  output: z.enum(['ok', 'not_media']).optional(),
});
export type FaultConfig = z.infer<typeof faultConfigSchema>;

export class Faults {
  private config: FaultConfig = {};
  private submitFaultsLeft: number | null = null;
  /** Every submit that asked for its fault (i.e. every submit received), with what it was answered. */
  readonly submits = new SubmitLog();

  get current(): FaultConfig {
    return { ...this.config, ...(this.submitFaultsLeft !== null ? { submit_fault_count: this.submitFaultsLeft } : {}) };
  }

  replace(config: FaultConfig): void {
    this.config = { ...config };
    this.submitFaultsLeft = config.submit_fault_count ?? null;
  }

  reset(): void {
    this.replace({});
  }

  /** The config as it applies to one provider ({} when the provider is not selected). */
  for(provider: SimProvider): FaultConfig {
    const c = this.current;
    return c.providers && !c.providers.includes(provider) ? {} : c;
  }

  /**
   * The submit fault for this request; consumes one of submit_fault_count. Counts the request in
   * `submits` (with its correlation token when the protocol passes one).
   */
  takeSubmitFault(provider: SimProvider = 'replicate', random: () => number = Math.random, token?: string | null): SubmitFault {
    const fault = this.pickSubmitFault(provider, random);
    this.submits.record(provider, token, fault);
    return fault;
  }

  private pickSubmitFault(provider: SimProvider, random: () => number): SubmitFault {
    const f = this.config.submit ?? 'ok';
    if (f === 'ok') return f;
    if (this.config.providers && !this.config.providers.includes(provider)) return 'ok';
    if (this.config.submit_fault_rate !== undefined && random() >= this.config.submit_fault_rate) return 'ok';
    if (this.submitFaultsLeft === null) return f;
    if (this.submitFaultsLeft <= 0) return 'ok';
    this.submitFaultsLeft -= 1;
    return f;
  }
}
