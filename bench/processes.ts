/**
 * Background-process rows (issue 9 §1), over the HTTP API through the SDK on gVisor: how long
 * `exec --background` takes to answer (against a foreground `exec true` round trip in the same run), and
 * how fast `logs` replays what the sandbox kept (both 1 MiB rings full).
 */
import type { Berth as BerthClient } from '../src/sdk/index.js';
import { row, sample, time, type Row } from './stats.js';

export async function benchProcesses(o: { berth: BerthClient; quick: boolean; log: (s: string) => void }): Promise<Row[]> {
  const rows: Row[] = [];
  const N = o.quick ? 10 : 40;
  const s = await o.berth.sessions.create({ memoryMb: 512 });
  try {
    o.log('gvisor: background start');
    await s.run(['true']);
    const fg = await sample(N, () => s.run(['true']));
    // The sandbox keeps 32 records; older finished ones make room, so N starts are fine.
    const bg = await sample(N, () => s.exec(['true'], { background: true }));
    rows.push({ ...row('exec --background, answer', 'gvisor', bg, fg, 'p50 <= foreground exec'), note: 'raw column: foreground exec true round trip (HTTP)' });

    o.log('gvisor: logs replay');
    const p = await s.exec(['sh', '-c', 'head -c 3000000 /dev/urandom | base64 -w 76; head -c 3000000 /dev/urandom | base64 -w 76 >&2'], { background: true });
    for (let i = 0; (await p.info()).state === 'running'; i++) {
      if (i > 600) throw new Error('the writer did not end');
      await new Promise((r) => setTimeout(r, 50));
    }
    const replay = async () => {
      let n = 0;
      for await (const ev of p.output()) if (ev.type !== 'exit') n += ev.data.byteLength;
      return n;
    };
    const [, bytes] = await time(replay);
    const times = await sample(o.quick ? 3 : 10, replay);
    const sorted = [...times].sort((a, b) => a - b);
    const mbps = bytes / 1048576 / ((sorted[Math.floor(sorted.length / 2)] as number) / 1000);
    rows.push({ ...row('logs replay, both rings full (2 MiB)', 'gvisor', times, null, ''), note: `${Math.round(mbps)} MB/s over HTTP NDJSON` });
  } finally {
    await s.terminate().catch(() => undefined);
  }
  return rows;
}
