/**
 * `berth serve --checkpoint-every 5m --checkpoint-to FILE|URL`: publishes a signed tree head at start, on
 * every tick and at shutdown, to a place outside the data directory: appended as one JSON line to a file
 * (put it on another mount, or one the operator ships off the machine), or POSTed as JSON to an HTTP(S)
 * endpoint the operator runs. A failed publication is logged and retried at the next tick; it never stops
 * the server.
 */
import { appendFile } from 'node:fs/promises';
import { relative, resolve, isAbsolute } from 'node:path';
import { ConfigError, type SignedHead } from '../core/index.js';
import type { Logger } from './log.js';

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** '90s', '5m', '1h', '500ms' → milliseconds; at least one second. */
export function parseDuration(text: string, field: string): number {
  const m = /^(\d+)(ms|s|m|h)$/.exec(text.trim());
  const ms = m ? Number(m[1]) * (UNITS[m[2] as string] as number) : NaN;
  if (!Number.isSafeInteger(ms) || ms < 1000) throw new ConfigError(`${field}: expected a duration of at least 1s such as 30s, 5m or 1h, got ${JSON.stringify(text)}`, { details: { field } });
  return ms;
}

export type CheckpointTarget = { kind: 'url'; url: string } | { kind: 'file'; path: string };

/** A URL (http: or https:) or a file path, which must lie outside the data directory. */
export function parseCheckpointTarget(text: string, o: { cwd: string; dataDir: string; field: string }): CheckpointTarget {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(text)) {
    let u: URL;
    try {
      u = new URL(text);
    } catch {
      throw new ConfigError(`${o.field}: not a URL: ${JSON.stringify(text)}`, { details: { field: o.field } });
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(`${o.field}: only http and https URLs`, { details: { field: o.field } });
    return { kind: 'url', url: u.href };
  }
  if (text === '') throw new ConfigError(`${o.field}: must not be empty`, { details: { field: o.field } });
  const path = resolve(o.cwd, text);
  const rel = relative(resolve(o.dataDir), path);
  if (rel === '' || (!rel.startsWith('..') && !isAbsolute(rel))) {
    throw new ConfigError(`${o.field}: ${path} is inside the data directory; checkpoints must be kept where whoever can rewrite the data cannot`, { details: { field: o.field } });
  }
  return { kind: 'file', path };
}

export interface CheckpointPublisherOptions {
  everyMs: number;
  to: CheckpointTarget;
  /** Signs a head over the whole log now. */
  checkpoint: () => Promise<SignedHead>;
  log: Logger;
  /** Per HTTP POST, ms. Default 10000. */
  timeoutMs?: number;
}

export interface CheckpointPublisher {
  /** Publishes one head now; resolves false if that failed (already logged). */
  publish(): Promise<boolean>;
  /** Stops the timer and publishes a last head. */
  stop(): Promise<void>;
}

export function startCheckpointPublisher(o: CheckpointPublisherOptions): CheckpointPublisher {
  let running: Promise<boolean> = Promise.resolve(true);
  const once = async (): Promise<boolean> => {
    try {
      const head = await o.checkpoint();
      const line = JSON.stringify(head);
      if (o.to.kind === 'file') {
        await appendFile(o.to.path, line + '\n', { mode: 0o600 });
      } else {
        const res = await fetch(o.to.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: line,
          signal: AbortSignal.timeout(o.timeoutMs ?? 10_000),
        });
        await res.body?.cancel().catch(() => undefined);
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
      }
      o.log.info('audit checkpoint published', { treeSize: head.treeSize, rootHash: head.rootHash, to: o.to.kind === 'file' ? o.to.path : o.to.url });
      return true;
    } catch (e) {
      o.log.warn('audit checkpoint not published', { error: (e as Error).message, to: o.to.kind === 'file' ? o.to.path : o.to.url });
      return false;
    }
  };
  // One publication at a time, in order.
  const publish = () => (running = running.then(once, once));
  void publish();
  const timer = setInterval(() => void publish(), o.everyMs);
  timer.unref();
  return {
    publish,
    async stop() {
      clearInterval(timer);
      await publish();
    },
  };
}
