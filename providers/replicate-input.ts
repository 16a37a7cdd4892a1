// The input each Replicate model of the catalog takes, built from our task input
// ({prompt, duration, resolution, first_frame_image?}, activities/provider-input.ts): the input
// names, durations, resolutions and image rules its published schema states
// (test/fixtures/provider-schemas/replicate/, docs/providers.md "Model input schemas"). A request
// outside them is refused here, before any call; the API refuses the same combinations at create
// (domain/catalog.ts). A field our input leaves out is not sent (the model's default applies).

/** Why a request cannot go to the model, named by our API's field. */
export interface ReplicateRefusal {
  readonly field: 'resolution' | 'duration_seconds' | 'input_image_url';
  readonly message: string;
}

interface ReplicateModel {
  /** Our resolutions → the input that asks for each ({} when the model renders it without one). */
  readonly resolutions: Readonly<Record<string, Readonly<Record<string, unknown>>>>;
  readonly durations: readonly number[];
  /** False when the model takes no duration: it renders `durations[0]` seconds, always. */
  readonly durationInput: boolean;
  /** The input carrying the first frame, and whether the model needs one. */
  readonly image: { readonly input: string; readonly required: boolean };
  /** Sent only without an image: the frame's shape, which a first frame decides otherwise. */
  readonly textOnly?: Readonly<Record<string, unknown>>;
}

/** The catalog's Replicate models (their official `owner/name` ids). */
export const REPLICATE_MODELS: Readonly<Record<string, ReplicateModel>> = {
  // prompt, first_frame_image, subject_reference, prompt_optimizer: 6 s at 720p, no other choice.
  'minimax/video-01': { resolutions: { '720p': {} }, durations: [6], durationInput: false, image: { input: 'first_frame_image', required: false } },
  // Image to video only; "Standard has a resolution of 720p, pro is 1080p".
  'kwaivgi/kling-v2.1': {
    resolutions: { '720p': { mode: 'standard' }, '1080p': { mode: 'pro' } },
    durations: [5, 10],
    durationInput: true,
    image: { input: 'start_image', required: true },
  },
  // Kling 2.0 Master: 720p, text or image ("aspect_ratio … Ignored if start_image is provided").
  'kwaivgi/kling-v2.0': {
    resolutions: { '720p': {} },
    durations: [5, 10],
    durationInput: true,
    image: { input: 'start_image', required: false },
    textOnly: { aspect_ratio: '16:9' },
  },
  // start_image_url: the version read names it so; the later form keeps it (deprecated) beside start_image.
  'luma/ray-2-720p': {
    resolutions: { '720p': {} },
    durations: [5, 9],
    durationInput: true,
    image: { input: 'start_image_url', required: false },
    textOnly: { aspect_ratio: '16:9' },
  },
};

/** The model's own id without a version (`owner/name:id` → `owner/name`). */
const officialId = (model: string): string => (model.includes(':') ? model.slice(0, model.lastIndexOf(':')) : model);

/** A string or number input as the key it names ('' for anything else, which matches no key). */
const scalar = (v: unknown): string => (typeof v === 'string' || typeof v === 'number' ? String(v) : '');

/**
 * Our task input → the input `model` takes, or why it cannot be sent. A model not listed in
 * REPLICATE_MODELS (none of the catalog's) is sent the task input as it is.
 */
export function replicateInput(
  model: string,
  input: Readonly<Record<string, unknown>>,
): { readonly input: Record<string, unknown> } | { readonly refused: ReplicateRefusal } {
  const spec = REPLICATE_MODELS[officialId(model)];
  if (!spec) return { input: { ...input } };
  const refuse = (field: ReplicateRefusal['field'], message: string) => ({ refused: { field, message } });
  const { resolution, duration, prompt, first_frame_image: image } = input;
  const asked = resolution === undefined ? {} : spec.resolutions[scalar(resolution)];
  if (!asked) return refuse('resolution', `${model} renders ${Object.keys(spec.resolutions).join(', ')}`);
  if (duration !== undefined && !spec.durations.includes(Number(duration)))
    return refuse('duration_seconds', `${model} takes ${spec.durations.join(', ')} seconds`);
  if (typeof image !== 'string' && spec.image.required) return refuse('input_image_url', `${model} needs an input image (image to video only)`);
  return {
    input: {
      ...(prompt !== undefined ? { prompt } : {}),
      ...asked,
      ...(spec.durationInput && duration !== undefined ? { duration: Number(duration) } : {}),
      ...(typeof image === 'string' ? { [spec.image.input]: image } : (spec.textOnly ?? {})),
    },
  };
}
