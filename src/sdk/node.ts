/**
 * `berth/sdk/node`: the SDK plus what only Node has, the environment and the data directory. Everything
 * of `berth/sdk` (which runs in browsers and bundlers too) is re-exported; `Berth` here also has fromEnv.
 *
 *   import { Berth } from 'berth/sdk/node';
 *   const berth = Berth.fromEnv();   // BERTH_URL, BERTH_TOKEN, else $BERTH_DATA/root.key
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createServer, type Socket } from 'node:net';
import { AppError } from '../core/errors.js';
import { fromWireError } from '../protocol/errors.js';
import { Berth as BaseBerth, type BerthOptions } from './client.js';
import { resolveEnv } from './env.js';
import { registerPortForwarder, type PortForward, type PortForwarder } from './ports.js';

export * from './index.js';
export { resolveEnv, type EnvResolution } from './env.js';

export class Berth extends BaseBerth {
  /** Options from BERTH_URL, BERTH_TOKEN / $BERTH_DATA/root.key; `overrides` win. */
  static fromEnv(overrides: BerthOptions = {}): Berth {
    const { options } = resolveEnv();
    return new Berth({ ...options, ...Object.fromEntries(Object.entries(overrides).filter(([, v]) => v !== undefined)) });
  }
}

/** The same as Berth.fromEnv(). */
export function fromEnv(overrides: BerthOptions = {}): Berth {
  return Berth.fromEnv(overrides);
}

// ---- ports.forward (issue 9 §3): a local TCP port tunnelled to a port inside the sandbox ----

/**
 * Each local connection becomes one `Upgrade: berth-tcp` request to the server's ports route; after its
 * 101 the connection carries raw bytes both ways. A refusal (nothing listening, bad token) closes that
 * local connection and is reported to onError; the forward itself keeps listening.
 */
const forwardPort: PortForwarder = async (o) => {
  const base = new URL(`${o.url.replace(/\/+$/, '')}/sessions/${encodeURIComponent(o.sessionId)}/ports/${o.port}/`);
  const request = base.protocol === 'https:' ? httpsRequest : httpRequest;
  const open = new Set<Socket>();
  const server = createServer((local) => {
    open.add(local);
    local.once('close', () => open.delete(local));
    local.on('error', () => undefined);
    local.pause();
    const req = request(base, {
      method: 'GET',
      headers: { connection: 'Upgrade', upgrade: 'berth-tcp', ...(o.token ? { authorization: `Bearer ${o.token}` } : {}) },
    });
    req.on('upgrade', (_res, remote, head) => {
      remote.on('error', () => local.destroy());
      local.once('close', () => remote.destroy());
      if (head.length) local.write(head);
      local.pipe(remote);
      remote.pipe(local);
      local.resume();
    });
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        let body: unknown = Buffer.concat(parts).toString();
        try {
          body = JSON.parse(body as string);
        } catch {
          // not ours: fromWireError maps the status alone
        }
        o.onError?.(fromWireError(body, res.statusCode ?? 502));
        local.destroy();
      });
    });
    req.on('error', (e) => {
      o.onError?.(new AppError('unavailable', `cannot reach Berth at ${o.url}: ${e.message}`, { cause: e, retryable: true }));
      local.destroy();
    });
    req.end();
  });
  const host = o.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(new AppError(e.code === 'EADDRINUSE' ? 'conflict' : 'unavailable', `cannot listen on ${host}:${o.localPort ?? 0}: ${e.message}`, { cause: e })),
    );
    server.listen(o.localPort ?? 0, host, () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= new Promise<void>((resolve) => {
      for (const s of open) s.destroy();
      server.close(() => resolve());
    }));
  o.signal?.addEventListener('abort', () => void close(), { once: true });
  const fwd: PortForward = { host, port, address: `${host.includes(':') ? `[${host}]` : host}:${port}`, close };
  return fwd;
};

registerPortForwarder(forwardPort);
