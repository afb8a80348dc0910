import { readFile, readdir } from 'node:fs/promises';

/** Proportional set size (KiB → bytes) of one process: shared pages split among their users. */
export async function pssBytes(pid: number): Promise<number> {
  const t = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
  const m = /^Pss:\s+(\d+) kB/m.exec(t);
  return m ? Number(m[1]) * 1024 : 0;
}

/** Pids whose command line contains `needle` (e.g. a sandbox id). */
export async function pidsMatching(needle: string): Promise<number[]> {
  const out: number[] = [];
  for (const d of await readdir('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = await readFile(`/proc/${d}/cmdline`, 'utf8').catch(() => '');
    if (cmd.includes(needle)) out.push(Number(d));
  }
  return out;
}

/** Host memory a set of sandboxes holds: the PSS of every process whose command line names one. */
export async function hostMemory(needles: string[]): Promise<number> {
  const seen = new Set<number>();
  let total = 0;
  for (const n of needles) {
    for (const pid of await pidsMatching(n)) {
      if (seen.has(pid)) continue;
      seen.add(pid);
      total += await pssBytes(pid);
    }
  }
  return total;
}

/** Bytes of every file below a directory. */
export async function dirBytes(dir: string): Promise<number> {
  const { stat } = await import('node:fs/promises');
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory()) total += await dirBytes(p);
    else total += (await stat(p).catch(() => ({ size: 0 }))).size;
  }
  return total;
}
