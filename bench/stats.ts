import { performance } from 'node:perf_hooks';

export interface Row {
  op: string;
  backend: string;
  n: number;
  berthP50Ms: number;
  berthP95Ms: number;
  rawP50Ms: number | null;
  rawP95Ms: number | null;
  /** berth p50 / raw p50. */
  ratio: number | null;
  target: string;
  /** Unit of the four figures. Default 'ms'. */
  unit?: 'ms' | 'MB';
  /** Extra figures (sizes, memory) for rows that are not timings. */
  note?: string;
}

export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[i] as number;
}

export async function time<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

export async function sample(n: number, fn: () => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push((await time(fn))[0]);
  return out;
}

/** n timings of a and of b, interleaved (a, b, a, b, …) so that drift in the machine's load hits both alike. */
export async function samplePair(n: number, a: () => Promise<unknown>, b: () => Promise<unknown>): Promise<[number[], number[]]> {
  const ta: number[] = [];
  const tb: number[] = [];
  for (let i = 0; i < n; i++) {
    ta.push((await time(a))[0]);
    tb.push((await time(b))[0]);
  }
  return [ta, tb];
}

/** The gate's cost target (issue 13 §4): a gated call's p50 within 2 ms of the same work ungated. */
export function gateRow(op: string, backend: string, gated: number[], ungated: number[]): Row {
  const extra = percentile(gated, 50) - percentile(ungated, 50);
  return { ...row(op, backend, gated, ungated, 'p50 <= raw + 2 ms'), note: `HTTP, all stages + audit; +${round(extra, 2)} ms p50` };
}

export function row(op: string, backend: string, berth: number[], raw: number[] | null, target: string, note?: string): Row {
  const b50 = percentile(berth, 50);
  const r50 = raw ? percentile(raw, 50) : null;
  return {
    op,
    backend,
    n: berth.length,
    berthP50Ms: round(b50),
    berthP95Ms: round(percentile(berth, 95)),
    rawP50Ms: r50 === null ? null : round(r50),
    rawP95Ms: raw ? round(percentile(raw, 95)) : null,
    ratio: r50 ? round(b50 / r50, 2) : null,
    target,
    ...(note ? { note } : {}),
  };
}

export const round = (x: number, d = 1) => Math.round(x * 10 ** d) / 10 ** d;

export function printTable(rows: Row[]): void {
  const head = ['backend', 'op', 'n', 'berth p50', 'berth p95', 'raw p50', 'raw p95', 'ratio', 'target', 'note'];
  const body = rows.map((r) => [
    r.backend, r.op, String(r.n), `${r.berthP50Ms} ${r.unit ?? 'ms'}`, `${r.berthP95Ms} ${r.unit ?? 'ms'}`,
    r.rawP50Ms === null ? '-' : `${r.rawP50Ms} ${r.unit ?? 'ms'}`, r.rawP95Ms === null ? '-' : `${r.rawP95Ms} ${r.unit ?? 'ms'}`,
    r.ratio === null ? '-' : `${r.ratio}x`, r.target, r.note ?? '',
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] as string).length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(w[i] as number)).join('  ');
  console.log(line(head));
  console.log(w.map((n) => '-'.repeat(n)).join('  '));
  for (const b of body) console.log(line(b));
}
