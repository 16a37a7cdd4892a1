// Type-level contract (checked by `npm run check`, never run): the request bodies our adapters
// build are assignable to the official SDKs' request types, so a body the SDK would not accept
// fails the type check. One assignment per endpoint we send.
import type { EndpointTypeMap } from '@fal-ai/client/endpoints';
import type { ImageToVideoCreateParams, TextToVideoCreateParams } from '@runwayml/sdk/resources';
import type { FAL_KLING_TEXT_MODELS, FalKlingTextInput } from '../../providers/fal';
import type { RunwayImageBody, RunwayTextBody } from '../../providers/runway';

type FalInputOf<M extends keyof EndpointTypeMap> = EndpointTypeMap[M]['input'];

/** Each of the types compiles only when the left side is assignable to the right. */
export type SdkContract = [
  Assignable<RunwayImageBody, ImageToVideoCreateParams>,
  Assignable<RunwayTextBody, TextToVideoCreateParams>,
  Assignable<FalKlingTextInput, FalInputOf<(typeof FAL_KLING_TEXT_MODELS)[number]>>,
];
type Assignable<A extends B, B> = [A, B];
