/**
 * Desktop rows (issue 11) on gVisor, each beside a plain figure measured in the same run:
 * - create → first screenshot of a desktop session, beside create → first exec of a plain session;
 * - a screenshot through the gate (HTTP, the computer tool, audited), beside raw `runsc exec scrot` in the
 *   same sandbox (the engine without Berth);
 * - a click → settled screenshot through the gate, beside raw `runsc exec` of xdotool click + scrot;
 * - host memory (PSS) per idle desktop session, beside a plain idle session.
 */
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Berth as BerthClient, Session } from '../src/sdk/index.js';
import { hostMemory } from './memory.js';
import { row, sample, time, type Row } from './stats.js';

function runscExec(dataDir: string, id: string, argv: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('runsc', [`--root=${join(dataDir, 'gvisor', 'runsc')}`, 'exec', '--env', 'DISPLAY=:0', id, ...argv], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d: Buffer) => (err += d.toString()));
    p.on('error', reject);
    p.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`runsc exec ${argv.join(' ')} exited ${code}: ${err.slice(-300)}`))));
  });
}

const sandboxIds = (dataDir: string): string[] => {
  try {
    return readdirSync(join(dataDir, 'gvisor', 'sandboxes'));
  } catch {
    return [];
  }
};

export async function benchDesktop(o: { berth: BerthClient; dataDir: string; quick: boolean; log: (s: string) => void }): Promise<Row[]> {
  const N = o.quick ? 10 : 40;
  const C = o.quick ? 2 : 5;
  const rows: Row[] = [];
  const made: Session[] = [];
  const call = (s: Session, args: Record<string, unknown>) => o.berth.tools.call(s.id, 'computer', args);
  try {
    o.log('desktop: create → first screenshot, vs plain create → first exec');
    const toShot: number[] = [];
    const toExec: number[] = [];
    for (let i = 0; i < C; i++) {
      toShot.push((await time(async () => {
        const s = await o.berth.sessions.create({ desktop: true, memoryMb: 512 });
        made.push(s);
        const r = await call(s, { action: 'screenshot' });
        if (r.decision !== 'allow') throw new Error(`screenshot: ${JSON.stringify(r)}`);
      }))[0]);
      toExec.push((await time(async () => {
        const s = await o.berth.sessions.create({ memoryMb: 512 });
        made.push(s);
        await s.run(['true']);
      }))[0]);
    }
    rows.push({ ...row('desktop: create → first screenshot', 'gvisor', toShot, toExec, 'report'), note: 'raw column: a plain session, create → first exec' });

    const desk = made[0] as Session;
    // The desktop session's running sandbox (one incarnation so far: nothing hibernated it).
    const sandboxId = sandboxIds(o.dataDir).find((x) => x.startsWith(`${desk.id}-g`));
    if (!sandboxId) throw new Error(`no sandbox of ${desk.id}`);
    o.log('desktop: screenshot round trip, gated vs raw runsc exec scrot');
    const shot = await sample(N, async () => {
      const r = await call(desk, { action: 'screenshot' });
      if (r.decision !== 'allow') throw new Error(JSON.stringify(r));
    });
    const rawShot = await sample(N, () => runscExec(o.dataDir, sandboxId, ['scrot', '-o', '/tmp/bench.png']));
    rows.push({ ...row('desktop: screenshot round trip (computer tool, HTTP)', 'gvisor', shot, rawShot, 'report'), note: 'raw: runsc exec scrot, same sandbox' });

    o.log('desktop: click → settled screenshot, gated vs raw');
    let k = 0;
    const click = await sample(N, async () => {
      const r = await call(desk, { action: 'left_click', coordinate: [600 + (k++ % 50), 400] });
      if (r.decision !== 'allow') throw new Error(JSON.stringify(r));
    });
    const rawClick = await sample(N, () => runscExec(o.dataDir, sandboxId, ['sh', '-c', `xdotool mousemove ${600 + (k++ % 50)} 400 click 1 && scrot -o /tmp/bench.png`]));
    rows.push({ ...row('desktop: click → settled screenshot (computer tool, HTTP)', 'gvisor', click, rawClick, 'report'), note: 'raw: runsc exec xdotool click + one scrot (no settling)' });

    o.log('desktop: host memory of idle desktop vs plain sessions');
    await new Promise((r) => setTimeout(r, 2000));
    const desks = made.filter((_, i) => i % 2 === 0).map((s) => s.id);
    const plains = made.filter((_, i) => i % 2 === 1).map((s) => s.id);
    const mb = (b: number, n: number) => Math.round((b / n / 1048576) * 10) / 10;
    const dm = mb(await hostMemory(desks), desks.length);
    const pm = mb(await hostMemory(plains), plains.length);
    rows.push({ ...row('desktop: idle session, host memory (PSS) each', 'gvisor', [dm], [pm], 'report'), unit: 'MB', note: 'raw column: an idle plain session' });
    return rows;
  } finally {
    for (const s of made) await s.terminate().catch(() => undefined);
  }
}
