/**
 * Port rows (issue 9 §3) on gVisor, through a real server: an HTTP request to a server inside the sandbox
 * through the port proxy against the same server program on the host (ratio in the same run), and a
 * 100 MB download through a forwarded port (`session.ports.forward`, the tunnel `berth port-forward` uses).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import '../src/sdk/node.js'; // the Node forwarder behind ports.forward
import type { Berth as BerthClient } from '../src/sdk/index.js';
import { row, sample, samplePair, type Row } from './stats.js';

const SMALL = 'x'.repeat(1024);
/** python3 -c SENDFILE_SERVER PORT FILE: answers every request with FILE, sent by socket.sendfile (sendfile(2)). */
const SENDFILE_SERVER = `
import os, socket, sys, threading
port, path = int(sys.argv[1]), sys.argv[2]
def answer(c):
    with c, open(path, 'rb') as f:
        c.recv(65536)
        c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % os.fstat(f.fileno()).st_size)
        c.sendfile(f)
s = socket.create_server(('127.0.0.1', port))
while True:
    threading.Thread(target=answer, args=(s.accept()[0],), daemon=True).start()
`;
const BIG_MB = 100;

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

async function get(url: string, headers: Record<string, string> = {}): Promise<number> {
  const r = await fetch(url, { headers });
  if (r.status !== 200) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  let n = 0;
  for await (const c of r.body as unknown as AsyncIterable<Uint8Array>) n += c.byteLength;
  return n;
}

export async function benchPorts(o: { berth: BerthClient; token: string; quick: boolean; log: (s: string) => void }): Promise<Row[]> {
  const rows: Row[] = [];
  const N = o.quick ? 20 : 100;
  const auth = { authorization: `Bearer ${o.token}` };
  const s = await o.berth.sessions.create({ memoryMb: 512 });
  const hostDir = await mkdtemp(join(tmpdir(), 'berth-bench-ports-'));
  const hostPort = await freePort();
  await writeFile(join(hostDir, 'small'), SMALL);
  const host = spawn('python3', ['-m', 'http.server', String(hostPort), '--bind', '127.0.0.1', '--directory', hostDir], { stdio: 'ignore' });
  try {
    o.log('ports: servers inside the sandbox and on the host');
    await s.files.write('/srv/small', SMALL);
    await s.run(['sh', '-c', `head -c ${BIG_MB}M /dev/zero > /srv/big`]);
    await s.exec(['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '--directory', '/srv'], { background: true });
    await s.exec(['python3', '-c', SENDFILE_SERVER, '8001', '/srv/big'], { background: true });
    const url = s.ports.url(8000);
    for (let i = 0; ; i++) {
      const ok = await get(`${url}small`, auth).then(() => true, () => false);
      const hostOk = await get(`http://127.0.0.1:${hostPort}/small`).then(() => true, () => false);
      if (ok && hostOk) break;
      if (i > 200) throw new Error('the servers did not start');
      await new Promise((r) => setTimeout(r, 200));
    }
    o.log('ports: HTTP request through the proxy vs the host');
    const proxied = await sample(N, () => get(`${url}small`, auth));
    const direct = await sample(N, () => get(`http://127.0.0.1:${hostPort}/small`));
    rows.push({ ...row('HTTP GET 1 KiB through the port proxy', 'gvisor', proxied, direct, ''), note: 'raw column: the same python3 http.server on the host' });

    // Two servers inside: Python's http.server (what an agent would start), and one that answers with
    // sendfile(2), which leaves the server's own cost out as far as the sandbox allows, so the row shows what
    // the forwarding path carries. Both are read the same way: through Berth, and by curl inside.
    for (const [port, server] of [[8000, 'python3 -m http.server'], [8001, 'a sendfile(2) server']] as const) {
      o.log(`ports: ${BIG_MB} MB download through a forwarded port, and by curl inside the sandbox (${server})`);
      const fwd = await s.ports.forward(port);
      try {
        // Interleaved, so both see the same host load. The raw column is the ceiling the sandbox itself
        // sets: the same server read over the sandbox's own loopback, no Berth in the path.
        const [through, inside] = await samplePair(
          o.quick ? 3 : 6,
          async () => {
            const n = await get(`http://${fwd.address}/big`);
            if (n !== BIG_MB << 20) throw new Error(`short download: ${n}`);
          },
          async () => {
            const r = await s.run(['curl', '-sS', '-o', '/dev/null', '-w', '%{size_download}', `http://127.0.0.1:${port}/big`]);
            if (r.code !== 0 || Number(r.stdout.toString()) !== BIG_MB << 20) throw new Error(`curl inside: ${r.code} ${r.stderr.toString()}`);
          },
        );
        const mbs = (t: number[]) => Math.round(BIG_MB / (([...t].sort((a, b) => a - b)[Math.floor(t.length / 2)] as number) / 1000));
        rows.push({
          ...row(`${BIG_MB} MB download through port-forward (${server})`, 'gvisor', through, inside, '>= 100 MB/s'),
          note: `${mbs(through)} MB/s through Berth; raw column: curl inside the sandbox from the same server, ${mbs(inside)} MB/s`,
        });
      } finally {
        await fwd.close();
      }
    }
  } finally {
    host.kill();
    await s.terminate().catch(() => undefined);
    await rm(hostDir, { recursive: true, force: true });
  }
  return rows;
}
