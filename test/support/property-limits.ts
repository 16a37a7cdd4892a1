// Loaded into every test file by scripts/test.ts (`--import`): a property's runs under fast-check,
// shrinking included, stop after a minute and fail if cut short. A clean pass of any property in
// this suite takes well under a second; a failing one over a large input could shrink for half an
// hour (the create-pace law did, holding CI until it was killed). Cut short, a failure is reported
// with the counterexample shrinking had reached.
import fc from 'fast-check';

export const PROPERTY_TIME_LIMIT_MS = 60_000;

fc.configureGlobal({ interruptAfterTimeLimit: PROPERTY_TIME_LIMIT_MS, markInterruptAsFailure: true });
