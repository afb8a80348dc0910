/**
 * Egress rows: what the gate adds to a new outbound connection, and the proxy's throughput, side by side
 * with a direct connection from the host to the same loopback server in the same run.
 *
 * The proxy is the server's own (engine/egress.ts) over the real engine, gate, Cedar and SQLite, with the
 * in-memory driver; the client reaches it over a host loopback socket, which stands in for the agent's
 * stream (the agent channel of a real sandbox is measured by the process and file rows).
 *   setup: CONNECT + gate decision (allow-list, Cedar net.connect, address check) + connect + first byte,
 *          vs connect + first byte directly.
 *   download: 100 MB through a CONNECT tunnel vs directly.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { systemClock } from '../src/core/index.js';
import { MemoryDriver } from '../src/drivers/memory/driver.js';
import { newSecret } from '../src/engine/auth.js';
import { composeEngine } from '../src/server/compose.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import { LocalSnapshotStore } from '../src/store/snapshot-dir.js';
import { round, row, type Row } from './stats.js';

const MB = 1024 * 1024;

async function listen(s: Server): Promise<number> {
  await new Promise<void>((done) => s.listen(0, '127.0.0.1', done));
  return (s.address() as AddressInfo).port;
}

export async function benchEgress(o: { quick?: boolean; log: (s: string) => void }): Promise<Row[]> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-bench-egress-'));
  const store = openSqliteStore({ path: join(dir, 'berth.db'), clock: systemClock });
  const driver = new MemoryDriver({ now: () => Date.now() });
  const side = await composeEngine({ dataDir: dir, store, snapshots: new LocalSnapshotStore(join(dir, 'snapshots')), drivers: { [driver.name]: driver }, rootKey: newSecret('btr'), clock: systemClock, idleSweepMs: 0 });
  const root = await side.manager.authenticate(side.rootKey);
  // The upstream: sends `size` bytes as soon as a connection opens (the size is the first thing it reads).
  const chunk = Buffer.alloc(256 * 1024, 97);
  const upstream = createServer((s) => {
    s.on('error', () => undefined);
    s.once('data', (d: Buffer) => {
      let left = Number(d.toString().trim());
      const pump = () => {
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          left -= n;
          if (!s.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void s.once('drain', pump);
        }
      };
      pump();
    });
  });
  const up = await listen(upstream);
  try {
    const { session } = await side.manager.createSession(root, { egressAllow: [`127.0.0.1:${up}`], egressAllowCidr: ['127.0.0.0/8'] });
    // Each connection's audit entry (a signed append) is written when it ends; the next setup waits for it,
    // so the setup figure is the decision and the connect, and the audit cost stays in the audit rows.
    let served: Promise<void> = Promise.resolve();
    const front = createServer({ allowHalfOpen: true }, (s) => void (served = side.manager.gate.egress.serve(session.id, s)));
    const fp = await listen(front);
    // The upstream waits for a size line; send it right after the tunnel opens.
    const get = (viaProxy: boolean, size: number) =>
      new Promise<number>((resolve, reject) => {
        const t0 = performance.now();
        const s = connect({ host: '127.0.0.1', port: viaProxy ? fp : up, noDelay: true }, () => {
          if (viaProxy) s.write(`CONNECT 127.0.0.1:${up} HTTP/1.1\r\n\r\n`);
          else s.write(`${size}\n`);
        });
        let head = viaProxy;
        let buf = Buffer.alloc(0);
        let got = 0;
        s.on('data', (d: Buffer) => {
          if (head) {
            buf = Buffer.concat([buf, d]);
            const at = buf.indexOf('\r\n\r\n');
            if (at < 0) return;
            if (!buf.toString('latin1', 0, 12).startsWith('HTTP/1.1 200')) return reject(new Error(buf.toString()));
            head = false;
            s.write(`${size}\n`);
            d = buf.subarray(at + 4);
          }
          got += d.length;
          if (got >= size) {
            s.destroy();
            resolve(performance.now() - t0);
          }
        });
        s.on('error', reject);
      });
    const n = o.quick ? 30 : 200;
    o.log(`egress: ${n} connection setups each way`);
    for (let i = 0; i < 10; i++) (await get(true, 1), await served, await get(false, 1));
    const gated: number[] = [];
    const direct: number[] = [];
    for (let i = 0; i < n; i++) {
      gated.push(await get(true, 1));
      await served;
      direct.push(await get(false, 1));
    }
    const setup = row('egress connect (decision + connect + 1st byte)', 'host', gated, direct, 'p50 <= direct + 3 ms');
    setup.note = `+${round((setup.berthP50Ms ?? 0) - (setup.rawP50Ms ?? 0), 2)} ms over direct`;
    const size = (o.quick ? 20 : 100) * MB;
    o.log(`egress: ${size / MB} MB download each way`);
    const viaProxy: number[] = [];
    const straight: number[] = [];
    for (let i = 0; i < (o.quick ? 1 : 3); i++) {
      viaProxy.push(await get(true, size));
      straight.push(await get(false, size));
    }
    const dl = row(`egress ${size / MB} MB download`, 'host', viaProxy, straight, 'throughput >= 0.5x direct');
    const mbps = (ms: number | null) => (ms ? round(size / MB / (ms / 1000), 0) : 0);
    dl.note = `${mbps(dl.berthP50Ms)} MB/s through the proxy vs ${mbps(dl.rawP50Ms)} MB/s direct (${round((dl.rawP50Ms ?? 0) / (dl.berthP50Ms ?? 1), 2)}x)`;
    front.close();
    return [setup, dl];
  } finally {
    upstream.close();
    await side.close();
    await rm(dir, { recursive: true, force: true });
  }
}
