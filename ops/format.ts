// Readable output for the ops CLI: aligned key/value blocks and tables, durations both ways.

/** "90s", "5m", "1h30m", "2d", "0" → seconds. Throws on anything else. */
export function parseDuration(text: string): number {
  const t = text.trim();
  if (t === '0') return 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/gy;
  const unit: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };
  let total = 0;
  let matched = 0;
  for (let m = re.exec(t); m; m = re.exec(t)) {
    total += Number(m[1]) * unit[m[2]!]!;
    matched = re.lastIndex;
  }
  if (matched === 0 || matched !== t.length) throw new Error(`not a duration: ${JSON.stringify(text)} (e.g. 30s, 5m, 1h30m)`);
  return Math.round(total);
}

export function formatSeconds(s: number | null | undefined): string {
  if (s === null || s === undefined || Number.isNaN(s)) return '-';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

const cell = (v: unknown): string => {
  if (v === null || v === undefined) return '-';
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  return JSON.stringify(v);
};

/** Key/value lines with the keys padded to one width. */
export function keyValues(pairs: [string, unknown][], indent = '  '): string {
  const width = Math.max(0, ...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${indent}${k.padEnd(width)}  ${cell(v)}`).join('\n');
}

/** A plain text table; `columns` picks and orders the fields. */
export function table<T extends Record<string, unknown>>(rows: readonly T[], columns: (keyof T & string)[], indent = '  '): string {
  if (rows.length === 0) return `${indent}(none)`;
  const cells = rows.map((r) => columns.map((c) => cell(r[c])));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]!.length)));
  const line = (values: string[]) =>
    indent +
    values
      .map((v, i) => v.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(columns), line(widths.map((w) => '-'.repeat(w))), ...cells.map(line)].join('\n');
}
