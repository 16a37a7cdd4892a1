// Operator resolutions of MANUAL_REVIEW, carried by workflow Updates. Pure: shared by the
// workflow (validators), the activity and the ops CLI.
export type ReviewResolution =
  | { readonly kind: 'bind-job'; readonly providerJobId: string; readonly operator: string; readonly reason: string }
  | { readonly kind: 'not-submitted'; readonly operator: string; readonly reason: string }
  | { readonly kind: 'fail'; readonly operator: string; readonly reason: string };

/** Returns what is wrong with a resolution, or null when it is well formed. */
export function reviewProblem(r: ReviewResolution): string | null {
  if (!r || typeof r !== 'object') return 'resolution missing';
  if (typeof r.operator !== 'string' || r.operator.trim().length < 2) return 'operator identity required';
  if (typeof r.reason !== 'string' || r.reason.trim().length < 3) return 'reason required';
  if (r.reason.length > 1000) return 'reason too long';
  if (r.kind === 'bind-job' && (typeof r.providerJobId !== 'string' || !/^[A-Za-z0-9_.:-]{1,200}$/.test(r.providerJobId))) {
    return 'providerJobId must be the provider job id';
  }
  if (!['bind-job', 'not-submitted', 'fail'].includes(r.kind)) return `unknown resolution ${String((r as { kind: unknown }).kind)}`;
  return null;
}
