// The clock the activities read (activities/deps.ts systemClock in production, a test clock in tests).
export interface Clock {
  now(): Date;
}
