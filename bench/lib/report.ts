// Output of a benchmark: progress lines and tables on stderr/stdout, or one JSON line (--json).
// With --json the JSON line is the only thing on stdout; everything else goes to stderr.

export type Cell = string | number | boolean | null | undefined;

export interface Goal {
  readonly name: string;
  readonly target: string;
  readonly measured: string;
  readonly met: boolean;
}

export interface Reporter {
  readonly json: boolean;
  /** Progress and log lines (stderr). */
  log(line: string): void;
  table(title: string, header: string[], rows: Cell[][]): void;
  goals(goals: Goal[]): void;
  /** The benchmark's figures: printed as one JSON line with --json. */
  result(figures: Record<string, unknown>): void;
}

export function createReporter(json: boolean): Reporter {
  const out = (s: string) => (json ? process.stderr : process.stdout).write(`${s}\n`);
  return {
    json,
    log: (line) => process.stderr.write(`${line}\n`),
    table(title, header, rows) {
      out('');
      out(title);
      out(formatTable(header, rows));
    },
    goals(goals) {
      this.table(
        'goals',
        ['goal', 'target', 'measured', 'met'],
        goals.map((g) => [g.name, g.target, g.measured, g.met ? 'yes' : 'NO']),
      );
    },
    result(figures) {
      if (json) process.stdout.write(`${JSON.stringify(figures)}\n`);
    },
  };
}

export function formatCell(c: Cell): string {
  if (c === null || c === undefined) return '-';
  if (typeof c === 'number') {
    if (!Number.isFinite(c)) return '-';
    if (Number.isInteger(c)) return String(c);
    return Math.abs(c) >= 100 ? c.toFixed(0) : Math.abs(c) >= 10 ? c.toFixed(1) : c.toFixed(2);
  }
  return String(c);
}

/** A plain-text table, numbers right-aligned. Markdown-compatible (pipes). */
export function formatTable(header: string[], rows: Cell[][]): string {
  const cells = rows.map((r) => r.map(formatCell));
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || r[i] == null));
  const line = (vals: string[]) => `| ${vals.map((v, i) => (numeric[i] ? v.padStart(widths[i]!) : v.padEnd(widths[i]!))).join(' | ')} |`;
  return [line(header), `|${widths.map((w, i) => (numeric[i] ? `${'-'.repeat(w + 1)}:` : '-'.repeat(w + 2))).join('|')}|`, ...cells.map(line)].join('\n');
}
