/**
 * TCP streams through the agent (PROTOCOL.md, "Sockets"), the agent run as a plain process on the host: its
 * "inside the sandbox" loopback is the host's, so real servers and clients on 127.0.0.1 stand on the other
 * side. The conformance suite runs the same primitive inside gVisor and QEMU.
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { AgentChannel } from './channel.js';
import { type Agent, codeOf, startAgent, useAgentHarness } from '../../../test/helpers/agent-harness.js';

useAgentHarness();

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Everything s sends until its end. Not `for await`: leaving that loop destroys a duplex, and with it
 * whatever it was still writing. */
function readAll(s: Duplex | Socket): Promise<Buffer> {
  const parts: Buffer[] = [];
  return new Promise((resolve, reject) => {
    s.on('data', (c: Buffer) => parts.push(c));
    s.once('end', () => resolve(Buffer.concat(parts)));
    s.once('error', reject);
  });
}

async function serve(onConn: (s: Socket) => void, host = '127.0.0.1'): Promise<{ server: Server; port: number }> {
  const server = createServer({ allowHalfOpen: true }, onConn);
  server.listen(0, host);
  await once(server, 'listening');
  return { server, port: (server.address() as { port: number }).port };
}

/** A free port nobody listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const { server, port } = await serve(() => undefined);
  server.close();
  await once(server, 'close');
  return port;
}

describe('agent sockets', () => {
  let a: Agent;
  beforeAll(async () => {
    a = await startAgent();
  });

  it('connects to a loopback server and relays both ways with half-close', async () => {
    const { server, port } = await serve((s) => {
      void readAll(s).then((b) => s.end(Buffer.concat([Buffer.from('got:'), b])));
    });
    try {
      const sock = await a.ch.sockets.openTcp(port);
      sock.end('hello');
      expect((await readAll(sock)).toString()).toBe('got:hello');
    } finally {
      server.close();
    }
  });

  it('moves 20 MiB each way intact, with back-pressure on a slow reader', async () => {
    const up = randomBytes(20 << 20);
    const down = randomBytes(20 << 20);
    let received = '';
    const { server, port } = await serve((s) => {
      void readAll(s).then((b) => (received = sha(b)));
      s.end(down);
    });
    try {
      const sock = await a.ch.sockets.openTcp(port);
      sock.end(up);
      // a slow start: nothing is read for a while, so the agent must stop at its credit
      await new Promise((r) => setTimeout(r, 200));
      expect(sock.readableLength).toBeLessThan(4 << 20);
      expect(sha(await readAll(sock))).toBe(sha(down));
      await expect.poll(() => received).toBe(sha(up));
    } finally {
      server.close();
    }
  });

  it('refuses a port nobody listens on with port_closed naming the port', async () => {
    const port = await closedPort();
    const e = (await a.ch.sockets.openTcp(port).catch((x: unknown) => x)) as { code: string; details: { port: number } };
    expect(e.code).toBe('port_closed');
    expect(e.details.port).toBe(port);
  });

  it('falls back to ::1 when 127.0.0.1 refuses', async () => {
    let srv: { server: Server; port: number };
    try {
      srv = await serve((s) => s.end('v6'), '::1');
    } catch {
      return; // no IPv6 loopback on this host: nothing to fall back to
    }
    try {
      const sock = await a.ch.sockets.openTcp(srv.port);
      sock.end();
      expect((await readAll(sock)).toString()).toBe('v6');
    } finally {
      srv.server.close();
    }
  });

  it('rejects ports outside 1-65535', async () => {
    for (const p of [0, -1, 65536, 1.5]) expect(await codeOf(a.ch.sockets.openTcp(p))).toBe('invalid_argument');
    expect(await codeOf(a.ch.sockets.listen(70000, () => undefined))).toBe('invalid_argument');
  });

  it('listens inside and announces each connection, relayed both ways', async () => {
    const seen: number[] = [];
    const port = await a.ch.sockets.listen(0, (sock, info) => {
      seen.push(info.port);
      void readAll(sock).then((b) => sock.end(b.toString().toUpperCase()));
    });
    expect(port).toBeGreaterThan(0);
    expect(await a.ch.sockets.listeners()).toContain(port);
    const replies = await Promise.all(
      ['one', 'two', 'three'].map(async (w) => {
        const c = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
        await once(c, 'connect');
        c.end(w);
        return (await readAll(c)).toString();
      }),
    );
    expect(replies).toEqual(['ONE', 'TWO', 'THREE']);
    expect(seen).toEqual([port, port, port]);
    await a.ch.sockets.unlisten(port);
    expect(await a.ch.sockets.listeners()).not.toContain(port);
    expect(await codeOf(a.ch.sockets.unlisten(port))).toBe('not_found');
  });

  it('a listener on a port in use is a conflict', async () => {
    const { server, port } = await serve(() => undefined);
    try {
      expect(await codeOf(a.ch.sockets.listen(port, () => undefined))).toBe('conflict');
    } finally {
      server.close();
    }
  });

  it('destroy() resets the connection: the peer sees an error or an abrupt end', async () => {
    const ended = new Promise<string>((resolve) => {
      void serve((s) => {
        s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
        s.on('end', () => resolve('end'));
        s.resume();
      }).then(async ({ port }) => {
        const sock = await a.ch.sockets.openTcp(port);
        sock.write('x');
        setTimeout(() => sock.destroy(), 50);
      });
    });
    expect(await ended).toBe('ECONNRESET');
  });

  it('a new host resets connections but keeps listeners; unclaimed connections are reset', async () => {
    const b = await startAgent();
    const port = await b.ch.sockets.listen(0, (s) => s.end('first host'));
    b.ch.close();
    const ch2 = await AgentChannel.connect({ input: b.proc.stdout, output: b.proc.stdin, helloIntervalMs: 50, timeoutMs: 5000 });
    expect(await ch2.sockets.listeners()).toContain(port);
    // nobody on this host claimed the port: the connection is accepted, then reset
    const c = connect({ port, host: '127.0.0.1' });
    const outcome = await new Promise<string>((resolve) => {
      c.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
      c.on('end', () => resolve('end'));
      c.resume();
    });
    expect(['ECONNRESET', 'end']).toContain(outcome);
    // listening again claims it
    expect(await ch2.sockets.listen(port, (s) => s.end('second host'))).toBe(port);
    const c2 = connect({ port, host: '127.0.0.1' });
    expect((await readAll(c2)).toString()).toBe('second host');
    ch2.close();
  });
});
