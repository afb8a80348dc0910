/**
 * Conformance cases for TCP streams into and out of the sandbox (SandboxDriver.openTcp / listenTcp; issue 9
 * §3, and the egress transport of issue 8 §2), run against every driver like driver-suite.ts. The cases
 * make their own server inside the machine with listenTcp, then reach it with openTcp: the connection goes
 * out of the agent and back in, so no userland is needed; with a Debian userland (`userland` 'full') a
 * real program's server is reached too.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import type { SandboxDriver, TcpConnectionInfo } from '../../src/core/index.js';
import { specFor, useConformanceTarget, type ConformanceTarget } from './driver-suite.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Everything s sends until its end (events, not `for await`: leaving that loop destroys a duplex). */
export function readAll(s: Duplex): Promise<Buffer> {
  const parts: Buffer[] = [];
  return new Promise((resolve, reject) => {
    s.on('data', (c: Buffer) => parts.push(c));
    s.once('end', () => resolve(Buffer.concat(parts)));
    s.once('error', reject);
  });
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'resolved';
  } catch (e) {
    return (e as { code?: string }).code ?? String(e);
  }
}

/** An echo server that upper-cases what it got once the client half-closes. */
function upper(seen?: TcpConnectionInfo[]) {
  return (s: Duplex, info: TcpConnectionInfo) => {
    seen?.push(info);
    s.on('error', () => undefined);
    void readAll(s).then((b) => s.end(b.toString().toUpperCase()), () => undefined);
  };
}

async function ask(d: SandboxDriver, id: string, port: number, text: string): Promise<string> {
  const s = await d.openTcp(id, port);
  s.end(text);
  return (await readAll(s)).toString();
}

export function socketConformance(name: string, make: () => Promise<ConformanceTarget>, opts: { timeoutMs?: number } = {}): void {
  const T = opts.timeoutMs ?? 60_000;
  describe(`driver conformance (sockets): ${name}`, () => {
    const fx = useConformanceTarget(name, 'sock', make);
    let d: SandboxDriver;
    let id: string;
    let images: string;
    beforeAll(async () => {
      d = fx.driver;
      images = fx.images;
      id = (await fx.start('sock')).sandboxId;
    }, T * 2);

    it('a listener inside the sandbox and a connection to it relay both ways, with half-close', async () => {
      const seen: TcpConnectionInfo[] = [];
      const l = await d.listenTcp(id, 0, upper(seen));
      expect(l.port).toBeGreaterThan(0);
      expect(await ask(d, id, l.port, 'hello')).toBe('HELLO');
      expect(await ask(d, id, l.port, 'again')).toBe('AGAIN');
      expect(seen.map((i) => i.port)).toEqual([l.port, l.port]);
      await l.close();
    }, T);

    it('moves 8 MiB each way intact', async () => {
      const down = randomBytes(8 << 20);
      let upSha = '';
      const l = await d.listenTcp(id, 0, (s) => {
        void readAll(s).then((b) => (upSha = sha(b)));
        s.end(down);
      });
      const up = randomBytes(8 << 20);
      const c = await d.openTcp(id, l.port);
      c.end(up);
      expect(sha(await readAll(c))).toBe(sha(down));
      await expect.poll(() => upSha, { timeout: T / 2 }).toBe(sha(up));
      await l.close();
    }, T);

    it('nothing listening is port_closed, naming the port; a closed listener refuses', async () => {
      const l = await d.listenTcp(id, 0, upper());
      const port = l.port;
      await l.close();
      const e = (await d.openTcp(id, port).catch((x: unknown) => x)) as { code: string; details: { port: number } };
      expect(e.code).toBe('port_closed');
      expect(e.details.port).toBe(port);
    }, T);

    it('ports outside 1-65535 are invalid_argument', async () => {
      for (const p of [0, 65536, -1, 80.5]) expect(await codeOf(d.openTcp(id, p))).toBe('invalid_argument');
      expect(await codeOf(d.listenTcp(id, 65536, upper()))).toBe('invalid_argument');
    }, T);

    it('destroying one end ends the other', async () => {
      let server: Duplex | undefined;
      const l = await d.listenTcp(id, 0, (s) => {
        server = s;
        s.on('error', () => undefined);
        s.resume();
      });
      const c = await d.openTcp(id, l.port);
      c.write('x');
      await expect.poll(() => server, { timeout: T / 2 }).toBeDefined();
      const closed = new Promise<void>((r) => server!.once('close', () => r()));
      c.destroy();
      await closed;
      await l.close();
    }, T);

    it('a listener survives checkpoint and restore (hibernate/wake); listening again attaches the new handler', async () => {
      const s = specFor('sock-wake');
      await d.create(s);
      const l = await d.listenTcp(s.sandboxId, 0, upper());
      const img = join(images, `wake-${Date.now()}`);
      await mkdir(img, { recursive: true });
      await d.checkpoint(s.sandboxId, img);
      // A wake is a new sandbox id (as the engine does it): the machine keeps its listener, and the host
      // attaches a handler to it by listening again on the same port.
      const woken = specFor('sock-woken', { identity: { ...s.identity, generation: 2, reason: 'wake' } });
      await d.restore(woken, img);
      const again = await d.listenTcp(woken.sandboxId, l.port, upper());
      expect(again.port).toBe(l.port);
      expect(await ask(d, woken.sandboxId, l.port, 'woken')).toBe('WOKEN');
      await d.destroy(woken.sandboxId);
      await d.destroy(s.sandboxId).catch(() => undefined);
    }, T * 2);

    it('reaches a server a program inside runs (python3 -m http.server)', async () => {
      if (d.capabilities.userland !== 'full') {
        // The built-in userland runs no servers: a port no program holds stays refused.
        expect(await codeOf(d.openTcp(id, 8765))).toBe('port_closed');
        return;
      }
      await d.startProcess(id, 'http-conf', { argv: ['python3', '-m', 'http.server', '8765', '--bind', '127.0.0.1', '--directory', '/etc'] });
      let text = '';
      await expect
        .poll(
          async () => {
            const c = await d.openTcp(id, 8765).catch(() => undefined);
            if (!c) return false;
            c.end('GET /hostname HTTP/1.0\r\nHost: x\r\n\r\n');
            text = (await readAll(c)).toString();
            return true;
          },
          { timeout: T / 2, interval: 200 },
        )
        .toBe(true);
      expect(text).toMatch(/^HTTP\/1\.0 200/);
      await d.killProcess(id, 'http-conf');
    }, T);
  });
}
