// A provider's content-moderation refusal as the tenant sees it (docs/decisions/0070): a final
// outcome of its own, never retried and never re-routed.
import type { ModerationRefusal } from './provider-job';

export const CONTENT_MODERATED = 'CONTENT_MODERATED';

/** The task's failure for a moderation refusal: the side the provider names, and its own code. */
export function moderatedFailure(m: ModerationRefusal): { failureCode: string; failureMessage: string } {
  const what = m.side === 'input' ? "the task's input" : m.side === 'output' ? 'the generated output' : 'the task';
  return {
    failureCode: CONTENT_MODERATED,
    failureMessage: `the provider's content moderation refused ${what} (${m.code}); it is not retried`,
  };
}
