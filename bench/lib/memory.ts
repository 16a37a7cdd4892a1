// Where a worker process's RSS is: the snapshots bench/lib/memory-preload.mjs writes once a
// second (main-thread heap, each worker thread's heap — the SDK's workflow thread — and
// /proc/self/status), read by the benchmark and turned into one row per phase.
import fs from 'node:fs';

interface IsolateHeap {
  readonly used: number;
  readonly total: number;
  /** Pages of the heap actually resident (what RSS sees of it). */
  readonly physical: number;
  /** Memory outside the heap that V8 was told about (ArrayBuffers, Buffers, …): malloc'd, so native. */
  readonly external: number;
  /** V8's own malloc (zones, compiler), beside its heap. */
  readonly malloced: number;
}

export interface MemorySnapshot {
  readonly at: number;
  readonly rss: number;
  readonly rssAnon: number;
  readonly rssFile: number;
  readonly main: IsolateHeap & { readonly arrayBuffers: number };
  readonly threads: readonly (IsolateHeap & { readonly name: string })[];
  /** glibc's heaps, resident bytes (the brk heap of the main arena, the other arenas' heaps), from /proc/self/smaps every 10 s; absent before the first read. */
  readonly malloc?: { readonly brkHeap: number; readonly arenaHeaps: number } | null;
}

export function readMemorySnapshot(file: string | null): MemorySnapshot | null {
  if (!file) return null;
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as MemorySnapshot;
  } catch {
    return null;
  }
}

const mb = (b: number) => b / 2 ** 20;
const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);

/** The SDK's workflow threads (workflow-worker-thread.js); other threads are counted apart. */
const isWorkflowThread = (name: string) => name.startsWith('workflow-worker-thread');

export interface MemoryBreakdown {
  readonly rssMb: number;
  readonly fileMb: number;
  readonly anonMb: number;
  readonly mainUsedMb: number;
  readonly mainResidentMb: number;
  readonly workflowThreads: number;
  readonly workflowUsedMb: number;
  readonly workflowResidentMb: number;
  readonly otherThreadsResidentMb: number;
  /** ArrayBuffers and the like V8 knows of, in every isolate (malloc'd: part of native). */
  readonly externalMb: number;
  /** Anonymous memory in no V8 heap: the Rust core, Node's and V8's mallocs, external buffers, the allocator's free pages. */
  readonly nativeMb: number;
  /** Of native: what lies in glibc's malloc heaps (used or free); null when not read. */
  readonly mallocMb: number | null;
}

export function breakdown(s: MemorySnapshot): MemoryBreakdown {
  const wf = s.threads.filter((t) => isWorkflowThread(t.name));
  const others = s.threads.filter((t) => !isWorkflowThread(t.name));
  const heapsResident = s.main.physical + sum(s.threads.map((t) => t.physical));
  return {
    rssMb: mb(s.rss),
    fileMb: mb(s.rssFile),
    anonMb: mb(s.rssAnon),
    mainUsedMb: mb(s.main.used),
    mainResidentMb: mb(s.main.physical),
    workflowThreads: wf.length,
    workflowUsedMb: mb(sum(wf.map((t) => t.used))),
    workflowResidentMb: mb(sum(wf.map((t) => t.physical))),
    otherThreadsResidentMb: mb(sum(others.map((t) => t.physical))),
    externalMb: mb(s.main.external + sum(s.threads.map((t) => t.external))),
    nativeMb: mb(s.rssAnon - heapsResident),
    mallocMb: s.malloc ? mb(s.malloc.brkHeap + s.malloc.arenaHeaps) : null,
  };
}

export const MEMORY_COLUMNS = [
  'RSS MB',
  'file-backed',
  'anonymous',
  'main heap used/resident',
  'workflow thread heap used/resident',
  'other threads',
  'external',
  'native (anon − heaps)',
  'of it in malloc heaps',
] as const;

export function memoryRow(b: MemoryBreakdown): (string | number)[] {
  const r = (x: number) => Math.round(x);
  return [
    r(b.rssMb),
    r(b.fileMb),
    r(b.anonMb),
    `${r(b.mainUsedMb)}/${r(b.mainResidentMb)}`,
    `${r(b.workflowUsedMb)}/${r(b.workflowResidentMb)}${b.workflowThreads === 1 ? '' : ` (${b.workflowThreads} threads)`}`,
    r(b.otherThreadsResidentMb),
    r(b.externalMb),
    r(b.nativeMb),
    b.mallocMb === null ? '-' : r(b.mallocMb),
  ];
}

/** A progress line's account of the worker's memory, from a snapshot ('' when there is none). */
export function memoryNote(s: MemorySnapshot | null): string {
  if (!s) return '';
  const b = breakdown(s);
  const r = (x: number) => Math.round(x).toString();
  return `  (native ${r(b.nativeMb)}${b.mallocMb === null ? '' : `, in malloc heaps ${r(b.mallocMb)}`}; main heap ${r(b.mainUsedMb)}/${r(b.mainResidentMb)}; workflow heap ${r(b.workflowUsedMb)}/${r(b.workflowResidentMb)} MB)`;
}
