// Money is NUMERIC(18,6) in Postgres and a decimal string in code. Arithmetic happens on
// integer micro-units (bigint) so that no float ever touches a balance.

const SCALE = 6;
const FACTOR = 10n ** BigInt(SCALE);
const DECIMAL = /^(-)?(\d{1,12})(?:\.(\d{1,6}))?$/;

export type Micros = bigint;

export function toMicros(amount: string): Micros {
  const m = DECIMAL.exec(amount.trim());
  if (!m) throw new RangeError(`not a decimal amount with at most 6 places: ${JSON.stringify(amount)}`);
  const [, sign, whole = '0', frac = ''] = m;
  const micros = BigInt(whole) * FACTOR + BigInt(frac.padEnd(SCALE, '0'));
  return sign ? -micros : micros;
}

export function fromMicros(micros: Micros): string {
  const negative = micros < 0n;
  const abs = negative ? -micros : micros;
  const whole = abs / FACTOR;
  const frac = (abs % FACTOR).toString().padStart(SCALE, '0');
  return `${negative ? '-' : ''}${whole}.${frac}`;
}

export const addMoney = (a: string, b: string): string => fromMicros(toMicros(a) + toMicros(b));
export const subMoney = (a: string, b: string): string => fromMicros(toMicros(a) - toMicros(b));
export const minMoney = (a: string, b: string): string => (toMicros(a) <= toMicros(b) ? normalize(a) : normalize(b));
export const compareMoney = (a: string, b: string): -1 | 0 | 1 => {
  const d = toMicros(a) - toMicros(b);
  return d < 0n ? -1 : d > 0n ? 1 : 0;
};
export const normalize = (a: string): string => fromMicros(toMicros(a));

/** amount × numerator / denominator, rounded half up to micro-units. */
export function scaleMoney(amount: string, numerator: bigint, denominator: bigint): string {
  if (denominator <= 0n) throw new RangeError('denominator must be positive');
  const scaled = toMicros(amount) * numerator;
  return fromMicros((scaled * 2n + denominator) / (2n * denominator));
}
