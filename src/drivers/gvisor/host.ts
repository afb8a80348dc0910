import { readFile, readdir } from 'node:fs/promises';

/**
 * What /proc says about this state directory's runsc processes. Every process runsc starts for a sandbox
 * (the sandbox itself, the gofer, a `runsc run|restore` still at work) carries `--root=<stateDir>/runsc` on
 * its command line, which is how a data directory recognises its own sandboxes, even those no state file
 * or directory records any more (a server killed in the middle of a fork).
 */
export interface RunscProcess {
  pid: number;
  /** The sandbox it belongs to, from its `--bundle=…/sandboxes/<id>/bundle` or its last argument. */
  sandboxId: string | undefined;
  args: string[];
}

export async function runscProcesses(root: string, sandboxesDir: string): Promise<RunscProcess[]> {
  const rootFlag = `--root=${root}`;
  const bundle = new RegExp(`^--bundle=${escape(sandboxesDir)}/([^/]+)/bundle$`);
  const out: RunscProcess[] = [];
  for (const d of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(d)) continue;
    const raw = await readFile(`/proc/${d}/cmdline`, 'utf8').catch(() => '');
    if (!raw.includes(rootFlag)) continue;
    const args = raw.split('\0').filter((a) => a !== '');
    if (!args.includes(rootFlag)) continue;
    let sandboxId: string | undefined;
    for (const a of args) sandboxId ??= bundle.exec(a)?.[1];
    out.push({ pid: Number(d), sandboxId, args });
  }
  return out;
}

function escape(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** The pids of one sandbox: its cgroup's members and every process naming it under this root. */
export function pidsOf(procs: RunscProcess[], sandboxId: string): number[] {
  return procs.filter((p) => p.sandboxId === sandboxId || p.args[p.args.length - 1] === sandboxId).map((p) => p.pid);
}
