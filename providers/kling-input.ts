// What Kling's text2video create takes per model, from our task input ({prompt, duration,
// resolution, first_frame_image?}): the model's durations and resolutions and whether a `mode`
// names them, as Kling's capability map and Create Task reference publish them
// (test/fixtures/provider-schemas/kling/, docs/providers.md "Model input schemas"). A request
// outside them is refused here, before any call; the API refuses the same combinations at create
// (domain/catalog.ts). A field our input leaves out is not sent (Kling's default applies).

/** Why a request cannot go to Kling, named by our API's field. */
export interface KlingRefusal {
  readonly field: 'model' | 'resolution' | 'duration_seconds' | 'input_image_url';
  readonly message: string;
}

/** The create fields a model's limits decide. */
export interface KlingModelFields {
  readonly duration?: '5' | '10';
  readonly mode?: 'std' | 'pro';
}

interface KlingTextModel {
  /** Our resolutions → the `mode` that asks for each (none: the model has no std/pro). */
  readonly resolutions: Readonly<Record<string, { readonly mode?: 'std' | 'pro' }>>;
  readonly durations: readonly ('5' | '10')[];
}

/** The text-to-video models we send (the capability map: kling-v2-master has no std/pro, 720p, 5 or 10 s). */
export const KLING_TEXT_MODELS: Readonly<Record<string, KlingTextModel>> = {
  'kling-v2-master': { resolutions: { '720p': {} }, durations: ['5', '10'] },
};

/** A string or number input as the key it names ('' for anything else, which matches no key). */
const scalar = (v: unknown): string => (typeof v === 'string' || typeof v === 'number' ? String(v) : '');

/** Our task input → the fields `modelName` takes, or why it cannot be sent. */
export function klingTextFields(
  modelName: string,
  input: Readonly<Record<string, unknown>>,
): { readonly fields: KlingModelFields } | { readonly refused: KlingRefusal } {
  const refuse = (field: KlingRefusal['field'], message: string) => ({ refused: { field, message } });
  const spec = KLING_TEXT_MODELS[modelName];
  if (!spec) return refuse('model', `${modelName} is not a Kling text-to-video model we send (${Object.keys(KLING_TEXT_MODELS).join(', ')})`);
  // Image to video is another endpoint, with other limits: not sent.
  if (typeof input['first_frame_image'] === 'string') return refuse('input_image_url', 'image input is not supported by the text2video adapter');
  const { resolution, duration } = input;
  const asked = resolution === undefined ? {} : spec.resolutions[scalar(resolution)];
  if (!asked) return refuse('resolution', `${modelName} renders ${Object.keys(spec.resolutions).join(', ')}`);
  const seconds = duration === undefined ? undefined : scalar(duration);
  if (seconds !== undefined && !(spec.durations as readonly string[]).includes(seconds)) {
    return refuse('duration_seconds', `${modelName} takes ${spec.durations.join(', ')} seconds`);
  }
  return { fields: { ...(seconds !== undefined ? { duration: seconds as '5' | '10' } : {}), ...(asked.mode ? { mode: asked.mode } : {}) } };
}
