/**
 * Terminal rows (issue 9 §2) on gVisor: a keystroke's echo round trip through the WebSocket (SDK → server
 * → agent → PTY → agent → server → SDK), beside the same echo through a raw `runsc exec` of `cat` on pipes
 * in the same sandbox (the engine without Berth: no PTY, no HTTP).
 */
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Berth as BerthClient } from '../src/sdk/index.js';
import { row, type Row } from './stats.js';

export async function benchTerminals(o: { berth: BerthClient; dataDir: string; quick: boolean; log: (s: string) => void }): Promise<Row[]> {
  const N = o.quick ? 30 : 200;
  const before = new Set(sandboxIds(o.dataDir));
  const s = await o.berth.sessions.create({ memoryMb: 512 });
  try {
    o.log('gvisor: terminal keystroke echo');
    const term = await s.terminals.create({ command: ['cat'] });
    const it = term[Symbol.asyncIterator]();
    const echo = async (ch: string): Promise<number> => {
      const t0 = performance.now();
      term.write(ch);
      for (let seen = ''; !seen.includes(ch); ) {
        const r = await it.next();
        if (r.done) throw new Error('the terminal ended');
        seen += Buffer.from(r.value).toString('latin1');
      }
      return performance.now() - t0;
    };
    const keys = 'abcdefghijklmnopqrstuvwxyz';
    for (let i = 0; i < 5; i++) await echo(keys[i % 26]!);
    const berth: number[] = [];
    for (let i = 0; i < N; i++) berth.push(await echo(keys[i % 26]!));

    const id = sandboxIds(o.dataDir).find((x) => !before.has(x));
    let raw: number[] | null = null;
    if (id) {
      const p = spawn('runsc', [`--root=${join(o.dataDir, 'gvisor', 'runsc')}`, 'exec', id, 'cat'], { stdio: ['pipe', 'pipe', 'ignore'] });
      let buf = '';
      let wake: (() => void) | null = null;
      p.stdout.on('data', (d: Buffer) => {
        buf += d.toString('latin1');
        wake?.();
      });
      const rawEcho = async (ch: string): Promise<number> => {
        buf = '';
        const t0 = performance.now();
        p.stdin.write(ch);
        while (!buf.includes(ch)) await new Promise<void>((r) => (wake = r));
        return performance.now() - t0;
      };
      for (let i = 0; i < 5; i++) await rawEcho(keys[i % 26]!);
      raw = [];
      for (let i = 0; i < N; i++) raw.push(await rawEcho(keys[i % 26]!));
      p.kill('SIGKILL');
    }
    term.close();
    return [{ ...row('terminal keystroke echo round trip (WebSocket)', 'gvisor', berth, raw, 'p50 <= 10 ms'), note: 'raw column: runsc exec cat on pipes, same sandbox' }];
  } finally {
    await s.terminate().catch(() => undefined);
  }
}

function sandboxIds(dataDir: string): string[] {
  try {
    return readdirSync(join(dataDir, 'gvisor', 'runsc')).flatMap((f) => /^(.+)_sandbox:(.+)\.state$/.exec(f)?.slice(2, 3) ?? []);
  } catch {
    return [];
  }
}
