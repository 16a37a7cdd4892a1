// Deliberately altered versions of the generation workflow, bundled only by the replay test to
// prove it can fail (and that the same change behind patched() does not). Histories carry no
// workflow id, so the replay test picks the variant through the id it replays under:
// `<variant>:<fixture>`. Never registered on a real worker.
import { patched, proxyActivities, sleep, workflowInfo } from '@temporalio/workflow';
import type { TaskActivities } from '../../../activities';
import { generationWorkflow as current, type GenerationInput, type GenerationResult } from '../../../workflows/generation';

const facts = proxyActivities<TaskActivities>({ startToCloseTimeout: '30s' });

export type BrokenVariant = 'reordered' | 'unpatched-timer' | 'patched-timer';

export async function generationWorkflow(input: GenerationInput): Promise<GenerationResult> {
  const variant = workflowInfo().workflowId.split(':')[0] as BrokenVariant;
  switch (variant) {
    case 'reordered':
      // Activities in a different order: dispatch before the first read of the facts.
      await facts.dispatchTask(input.taskId);
      return current(input);
    case 'unpatched-timer':
      // A new timer in front of existing code, without a patch.
      await sleep('1 second');
      return current(input);
    case 'patched-timer':
      // The same timer behind patched(): old histories take the old path.
      if (patched('grace-before-start')) await sleep('1 second');
      return current(input);
  }
}
