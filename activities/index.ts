// All task activities, built from their dependencies. The workflow proxies
// ReturnType<typeof createTaskActivities>.
import { createProviderWaitActivities } from './await-provider';
import { createCancelActivities } from './cancel';
import type { TaskActivityDeps } from './deps';
import { createDispatchActivities } from './dispatch';
import { createInboxActivities, createInboxApply } from './apply-inbox';
import { createMediaActivities } from './process-media';
import { createPollActivities, createPollSteps } from './poll-provider';
import { createRescueActivities } from './rescue-output';
import { createReviewActivities } from './review';
import { createSubmitActivities } from './submit-attempt';
import { createFactActivities } from './task-facts';
import { createThumbnailFollowUp } from './thumbnail';

export function createTaskActivities(deps: TaskActivityDeps) {
  // One follow-up queue per set of activities, i.e. per worker process (activities/thumbnail.ts).
  const media = createMediaActivities(deps, createThumbnailFollowUp(deps));
  // One inbox step, run by applyInbox and inside a wait's read (docs/decisions/0051).
  const applyPending = createInboxApply(deps);
  const inbox = createInboxActivities(deps, applyPending);
  const polls = createPollSteps(deps);
  return {
    ...createFactActivities(deps),
    ...createDispatchActivities(deps, applyPending),
    ...createSubmitActivities(deps, applyPending),
    ...inbox,
    ...createPollActivities(polls),
    ...createProviderWaitActivities({ pollAndApply: (taskId) => polls.poll(taskId, applyPending), applyInbox: inbox.applyInbox }),
    ...createRescueActivities(deps, media),
    ...media,
    ...createCancelActivities(deps),
    ...createReviewActivities(deps),
  };
}

export type TaskActivities = ReturnType<typeof createTaskActivities>;
export type { TaskActivityDeps } from './deps';
