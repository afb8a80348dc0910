/** `berth serve` as a child process, for end-to-end tests that kill and restart it. */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { IMAGE_CACHE, REPO } from './env.js';

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

/** Starts `berth serve` and resolves once it logs "ready" (it listens at once and answers 503 until then). */
export async function serveProcess(dataDir: string, port: number, opts: { timeoutMs?: number } = {}): Promise<ChildProcess> {
  const child = spawn(process.execPath, [join(REPO, 'bin', 'berth'), 'serve', '--data', dataDir, '--port', String(port), '--image-cache', IMAGE_CACHE], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr?.on('data', (b: Buffer) => (out += b.toString()));
  for (const until = Date.now() + (opts.timeoutMs ?? 240_000); Date.now() < until; ) {
    if (out.includes('"msg":"ready"')) return child;
    if (child.exitCode !== null) throw new Error(`berth serve exited: ${out}`);
    await sleep(100);
  }
  throw new Error(`berth serve did not start: ${out}`);
}

/** Sandboxes runsc knows under this data directory, from its state files (`runsc list` hangs on a frozen one). */
export function runscIds(dataDir: string): string[] {
  const dir = join(dataDir, 'gvisor', 'runsc');
  return existsSync(dir) ? readdirSync(dir).flatMap((f) => /^(.+)_sandbox:(.+)\.state$/.exec(f)?.slice(2, 3) ?? []) : [];
}
