/**
 * File verbs beyond one file (issue 9 §4): move (rename inside the sandbox), a directory in and out as a
 * tar stream (`tar` inside the sandbox does the packing, so modes, symlinks and binary content are kept and
 * nothing is held whole on the host: stdin and stdout stream with the channel's flow control), and watch
 * (inotify events from the agent). Operator calls, like every file route; kept apart from manager.ts, which
 * lends its steps through ProcessSteps (engine/processes.ts).
 */
import {
  AppError,
  InvalidArgumentError,
  type CallOptions,
  type ExecHandle,
  type Principal,
  type WatchEvent,
} from '../core/index.js';
import type { ProcessSteps } from './processes.js';

export interface FileService {
  /** rename(2) inside the sandbox: atomic, within one file system; replaces a file at `to`. */
  move(p: Principal, sessionId: string, from: string, to: string, opts?: CallOptions): Promise<void>;
  /** Unpacks a tar stream into dir (created with its parents), keeping modes and symlinks. Resolves with the bytes taken. */
  pushTar(p: Principal, sessionId: string, dir: string, tar: AsyncIterable<Uint8Array>, opts?: CallOptions): Promise<number>;
  /** The directory as a tar stream (paths relative to it). A failure after the first byte ends the stream with an error. */
  pullTar(p: Principal, sessionId: string, dir: string, opts?: CallOptions): Promise<AsyncIterable<Uint8Array>>;
  /** File system events under path until the iteration stops; resolves once the watch is in place. */
  watch(p: Principal, sessionId: string, path: string, opts?: CallOptions & { recursive?: boolean }): Promise<AsyncIterable<WatchEvent>>;
}

function checkPath(field: string, path: string): string {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0') || path.length > 4096) {
    throw new InvalidArgumentError(`${field}: must be an absolute path`, { details: { field } });
  }
  return path;
}

/** tar's exit: 127 means there is no tar in the sandbox's image; anything else non-zero is its own complaint. */
function tarFailure(code: number, stderr: string, what: string): AppError {
  if (code === 127) return new AppError('unavailable', `${what}: this sandbox has no tar (its image lacks it)`, { details: { exitCode: code } });
  return new InvalidArgumentError(`${what}: tar failed (exit ${code}): ${stderr.trim().slice(0, 2000)}`, { details: { exitCode: code } });
}

async function collectStderr(h: ExecHandle, onStdout?: (d: Uint8Array) => Promise<void>): Promise<string> {
  let err = '';
  for await (const ev of h) {
    if (ev.type === 'stderr' && err.length < 8192) err += Buffer.from(ev.data).toString();
    else if (ev.type === 'stdout') await onStdout?.(ev.data);
  }
  return err;
}

export function fileService(m: ProcessSteps): FileService {
  return {
    async move(p, sessionId, from, to, opts = {}) {
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      await d.rename(sandboxId, checkPath('from', from), checkPath('to', to), opts);
      await m.audit(p, tenantId, sessionId, 'session.files.move', { from, to });
    },

    async pushTar(p, sessionId, dir, tar, opts = {}) {
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      await d.mkdir(sandboxId, checkPath('path', dir), { ...opts, parents: true });
      // --no-same-owner: files belong to the sandbox's user, not to uids from the packing machine.
      const h = await d.exec(sandboxId, { argv: ['tar', '-x', '-p', '--no-same-owner', '-f', '-', '-C', dir], stdin: true }, opts);
      const stderr = collectStderr(h);
      let bytes = 0;
      try {
        for await (const chunk of tar) {
          await h.writeStdin(chunk);
          bytes += chunk.byteLength;
          m.meter(sessionId, { bytesIn: chunk.byteLength });
        }
        await h.closeStdin();
      } catch (e) {
        await h.kill(9).catch(() => undefined);
        throw e;
      }
      const exit = await h.wait();
      const err = await stderr;
      await m.audit(p, tenantId, sessionId, 'session.files.push', { path: dir, bytes, exitCode: exit.code });
      if (exit.code !== 0) throw tarFailure(exit.code, err, `push into ${dir}`);
      return bytes;
    },

    async watch(p, sessionId, path, opts = {}) {
      const { d, sandboxId } = await m.live(p, sessionId, opts);
      return d.watchFiles(sandboxId, checkPath('path', path), opts);
    },

    async pullTar(p, sessionId, dir, opts = {}) {
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      const st = await d.stat(sandboxId, checkPath('path', dir), opts);
      if (st.type !== 'dir') throw new InvalidArgumentError(`path: ${dir} is not a directory`, { details: { field: 'path', type: st.type } });
      const h = await d.exec(sandboxId, { argv: ['tar', '-c', '-f', '-', '-C', dir, '.'] }, opts);
      await m.audit(p, tenantId, sessionId, 'session.files.pull', { path: dir });
      return (async function* () {
        let err = '';
        let done = false;
        try {
          for await (const ev of h) {
            if (ev.type === 'stdout') {
              m.meter(sessionId, { bytesOut: ev.data.byteLength });
              yield ev.data;
            } else if (ev.type === 'stderr' && err.length < 8192) err += Buffer.from(ev.data).toString();
          }
          done = true;
        } finally {
          if (!done) await h.kill(9).catch(() => undefined);
        }
        const exit = await h.wait();
        if (exit.code !== 0) throw tarFailure(exit.code, err, `pull of ${dir}`);
      })();
    },
  };
}
