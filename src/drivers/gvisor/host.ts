import { execFile } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { SandboxError } from '../../core/index.js';

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

/**
 * The agent channel's FIFO buffers, bytes. Linux gives a pipe 64 KiB, about one channel line, so the agent
 * waited for the server after every line. With 1 MiB, a port-forward of 100 MB from a server inside went
 * from a median of 47 to 62 MB/s here (8 downloads each, the two sizes alternating in one session).
 */
export const CHANNEL_PIPE_BYTES = 1 << 20;

/**
 * Creates the channel's FIFOs, mode 0600, with mkfifo(1) (Node has no mkfifo), without blocking the event
 * loop: a create, wake or fork branch costs this spawn, and every other session's requests wait out a
 * synchronous one (about 2 ms here).
 */
export async function makeFifos(fifos: string[]): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    execFile('mkfifo', ['-m', '600', ...fifos], { timeout: 10_000 }, (e, _out, err) =>
      e ? reject(new SandboxError(`mkfifo failed: ${err.trim() || e.message}`, { cause: e })) : resolve(),
    );
  });
}

/**
 * Sets the FIFOs' buffers (CHANNEL_PIPE_BYTES) with the agent binary, which is static and runs on the host
 * too (`berth-agent --pipe-size`): Node has no fcntl. Best effort: the channel works at any size, so a
 * failure is only returned, for a log line.
 */
export async function growPipes(agentPath: string, fifos: string[]): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(agentPath, ['--pipe-size', String(CHANNEL_PIPE_BYTES), ...fifos], { timeout: 10_000 }, (e, _out, err) => resolve(e ? (err.trim() || e.message) : null));
  });
}
