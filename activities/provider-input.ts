// The provider input of a task: a pure function of the request stored on the task, so the submit
// and the reconciliation of an unknown submit (which matches the exact input we sent) agree.

/** The provider's input for a task request (generation_task.request). */
export function providerInput(request: unknown): Record<string, unknown> {
  const req = request as { prompt: string; duration_seconds: number; resolution: string; input_image_url?: string };
  return {
    prompt: req.prompt,
    duration: req.duration_seconds,
    resolution: req.resolution,
    ...(req.input_image_url ? { first_frame_image: req.input_image_url } : {}),
  };
}
