/**
 * A real `berth serve` process for the soak and crash-loop scripts: started in its own process group (as a
 * shell or a supervisor would start it), on loopback, with the repository's image cache.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { packageRoot } from '../src/server/compose.js';

export const ROOT = packageRoot();
const TAIL = 4000;

/** A berth server process and what it has said; `exited` settles when it exits, for whatever reason. */
export interface ServerProcess {
  child: ChildProcess;
  url: string;
  token: string;
  /** From spawn to the "ready" line (recovery runs before it). */
  startMs: number;
  stderr: () => string;
  stdout: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export class StartupError extends Error {
  constructor(
    message: string,
    readonly output: string,
  ) {
    super(message);
  }
}

/**
 * Starts `berth serve --port 0` on `dataDir` (bin/berth, or `entry`: a CLI entry point run by Node itself) and
 * resolves once it is ready. The child leads its own process
 * group (`detached`), so `process.kill(-child.pid, sig)` is what Ctrl-C in its terminal would do.
 */
export async function startServerProcess(o: { node?: string; dataDir: string; port?: number; timeoutMs?: number; extraArgs?: string[]; entry?: string; env?: NodeJS.ProcessEnv }): Promise<ServerProcess> {
  const node = o.node ?? process.execPath;
  const t0 = performance.now();
  const args = [o.entry ?? join(ROOT, 'bin', 'berth'), 'serve', '--host', '127.0.0.1', '--port', String(o.port ?? 0), '--data', o.dataDir, '--image-cache', join(ROOT, '.berth', 'images'), ...(o.extraArgs ?? [])];
  const child = spawn(node, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true, ...(o.env ? { env: o.env } : {}) });
  let out = '';
  let err = '';
  child.stdout?.on('data', (b: Buffer) => (out = (out + b.toString()).slice(-64_000)));
  child.stderr?.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-TAIL)));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => child.once('exit', (code, signal) => res({ code, signal })));
  const deadline = performance.now() + (o.timeoutMs ?? 120_000);
  while (performance.now() < deadline) {
    // "ready", not "listening": the server listens first and answers 503 until recovery and the backends are done.
    const m = /"msg":"ready","url":"([^"]+)"/.exec(out);
    if (m) {
      const token = (await readFile(join(o.dataDir, 'root.key'), 'utf8')).trim();
      return { child, url: m[1] as string, token, startMs: performance.now() - t0, stderr: () => err, stdout: () => out, exited };
    }
    if (child.exitCode !== null || child.signalCode !== null) throw new StartupError(`berth serve exited at start (${child.exitCode ?? child.signalCode})`, err || out);
    await sleep(25);
  }
  killGroup(child, 'SIGKILL');
  throw new StartupError(`berth serve did not start in ${Math.round((o.timeoutMs ?? 120_000) / 1000)} s`, err || out);
}

/** Signals the server's whole process group, as a terminal's Ctrl-C or a supervisor's stop does. */
export function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
export async function stopServerProcess(s: ServerProcess, graceMs = 30_000): Promise<void> {
  if (s.child.exitCode !== null || s.child.signalCode !== null) return;
  s.child.kill('SIGTERM');
  await Promise.race([s.exited, sleep(graceMs)]);
  if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL');
  await s.exited;
}
