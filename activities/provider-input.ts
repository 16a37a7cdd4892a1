// The provider input of a task: a pure function of the request stored on the task, so the submit
// and the reconciliation of an unknown submit (which matches the exact input we sent) agree.
import type { TaskRequest } from '../domain/task-request';

/** The provider's input for a task request (generation_task.request). */
export function providerInput(req: Pick<TaskRequest, 'prompt' | 'duration_seconds' | 'resolution' | 'input_image_url'>): Record<string, unknown> {
  return {
    prompt: req.prompt,
    duration: req.duration_seconds,
    resolution: req.resolution,
    ...(req.input_image_url ? { first_frame_image: req.input_image_url } : {}),
  };
}
