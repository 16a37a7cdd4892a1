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

export const OUTPUT_FAULTS = [
  'ok',
  /** Answer 200 with the full Content-Length, send about half of the file, then reset the connection. */
  'reset_mid_body',
  /** Replicate output files only: serve bytes that are no video (the media check must refuse them). */
  'not_media',
] as const;
export type OutputFault = (typeof OUTPUT_FAULTS)[number];

export const SIM_PROVIDERS = ['replicate', 'fal', 'runway', 'kling'] as const;
export type SimProvider = (typeof SIM_PROVIDERS)[number];

export const faultConfigSchema = z.strictObject({
  /** Apply the faults below only to these providers (default: all). */
  providers: z.array(z.enum(SIM_PROVIDERS)).optional(),
  /** Apply the submit fault to this share of submits only (0..1, default 1): the "70 % failure" retry-storm experiment. */
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
  /** GET of an output file (any protocol): what a rescue download meets. */
  output: z.enum(OUTPUT_FAULTS).optional(),
  /** Apply the output fault to this share of output reads only (0..1, default 1). */
  output_fault_rate: z.number().min(0).max(1).optional(),
  /** Apply the output fault to the next N output reads only, then serve them whole. */
  output_fault_count: z.number().int().min(0).optional(),
  /** GET /v1/predictions/:id */
  status: z.enum(['ok', 'error_5xx']).optional(),
  /**
   * Serve output files this many bytes larger: the sample MP4 followed by an ISO BMFF 'free' box
   * (ignored by players and probes). A large output for resumed-download tests and drills.
   */
  output_pad_bytes: z
    .number()
    .int()
    .min(0)
    .max(256 * 1024 * 1024)
    .optional(),
  /** GET /v1/predictions (listing) */
  list: z.enum(['ok', 'error_5xx']).optional(),
  /**
   * Replicate: a new prediction stays `starting` this long (a cold boot, a busy queue) before it
   * runs; its generation time follows. What a `Cancel-After` meets.
   */
  start_delay_ms: z.number().int().min(0).max(600_000).optional(),
  /**
   * Kling: a task created from now on is readable (get by task id or external_task_id, the list)
   * only this long after it was created; a second create with its external_task_id is refused at
   * once (over SIMULATOR_KLING_VISIBLE_AFTER_MS).
   */
  kling_visible_after_ms: z.number().int().min(0).max(3_600_000).optional(),
  /**
   * Runway: the account's generations per model in the window (`runway_daily_window_ms`, default a
   * day); a create over it is answered 429 and creates nothing, as Runway's usage tiers document.
   */
  runway_daily_generations: z.number().int().min(0).optional(),
  runway_daily_window_ms: z.number().int().min(1).max(86_400_000).optional(),
  /**
   * Runway: tasks created from now on fail content moderation, on their input (`SAFETY.INPUT.TEXT`,
   * before they run) or on their output (`SAFETY.OUTPUT.VIDEO`, after generating), as Runway's task
   * failures document.
   */
  runway_moderation: z.enum(['input', 'output']).optional(),
  /** Kling: what a get of an id it does not serve answers (over SIMULATOR_KLING_NOT_FOUND). */
  kling_not_found: z.enum(['404-1203', '400-1201']).optional(),
  /**
   * Replicate's list `next` link on this origin (scheme://host[:port]) instead of the
   * simulator's own: a link that names another scheme or host, as Replicate's documented examples
   * do (one with plain http).
   */
  list_next_origin: z.url().optional(),
});
export type FaultConfig = z.infer<typeof faultConfigSchema>;

/** A fault that applies to a share of requests (rate) and to the next N of them (count), per provider. */
class Knob<F extends string> {
  private left: number | null = null;
  constructor(
    private readonly fault: () => F | 'ok',
    private readonly rate: () => number | undefined,
  ) {}

  reset(count: number | undefined): void {
    this.left = count ?? null;
  }

  get remaining(): number | null {
    return this.left;
  }

  take(selected: boolean, random: () => number): F | 'ok' {
    const f = this.fault();
    if (f === 'ok' || !selected) return 'ok';
    const rate = this.rate();
    if (rate !== undefined && random() >= rate) return 'ok';
    if (this.left === null) return f;
    if (this.left <= 0) return 'ok';
    this.left -= 1;
    return f;
  }
}

export class Faults {
  private config: FaultConfig = {};
  private readonly submitKnob = new Knob<SubmitFault>(
    () => this.config.submit ?? 'ok',
    () => this.config.submit_fault_rate,
  );
  private readonly outputKnob = new Knob<OutputFault>(
    () => this.config.output ?? 'ok',
    () => this.config.output_fault_rate,
  );
  /** Every submit that asked for its fault (i.e. every submit received), with what it was answered. */
  readonly submits = new SubmitLog();

  get current(): FaultConfig {
    const submitLeft = this.submitKnob.remaining;
    const outputLeft = this.outputKnob.remaining;
    return {
      ...this.config,
      ...(submitLeft !== null ? { submit_fault_count: submitLeft } : {}),
      ...(outputLeft !== null ? { output_fault_count: outputLeft } : {}),
    };
  }

  replace(config: FaultConfig): void {
    this.config = { ...config };
    this.submitKnob.reset(config.submit_fault_count);
    this.outputKnob.reset(config.output_fault_count);
  }

  reset(): void {
    this.replace({});
  }

  /** The config as it applies to one provider ({} when the provider is not selected). */
  for(provider: SimProvider): FaultConfig {
    const c = this.current;
    return c.providers && !c.providers.includes(provider) ? {} : c;
  }

  private selects(provider: SimProvider): boolean {
    return !this.config.providers || this.config.providers.includes(provider);
  }

  /**
   * The submit fault for this request; consumes one of submit_fault_count. Counts the request in
   * `submits` (with its correlation token when the protocol passes one).
   */
  takeSubmitFault(provider: SimProvider = 'replicate', random: () => number = Math.random, token?: string | null): SubmitFault {
    const fault = this.submitKnob.take(this.selects(provider), random);
    this.submits.record(provider, token, fault);
    return fault;
  }

  /** The output fault for one read of an output file; consumes one of output_fault_count. */
  takeOutputFault(provider: SimProvider, random: () => number = Math.random): OutputFault {
    return this.outputKnob.take(this.selects(provider), random);
  }
}
