/**
 * The SandboxAccess the tool gate's executors use, built over SessionManager's own steps: the live sandbox
 * of a session (woken when hibernated), metered like the public verbs. Nothing here audits: the gate audits
 * the whole call. Kept apart from manager.ts so the manager stays one readable file.
 */
import { InvalidArgumentError, type CallOptions, type ExecHandle, type ExecRequest, type Principal, type SandboxDriver, type SessionState } from '../core/index.js';
import { countBytes, type PendingCounts } from './metering.js';
import type { SandboxAccess } from './executor.js';

export interface LiveSandbox {
  d: SandboxDriver;
  sandboxId: string;
}

export interface ManagerSteps {
  /** The running sandbox (waking a hibernated session); throws invalid_state when paused, failed or gone. */
  live(sessionId: string, opts: CallOptions): Promise<LiveSandbox>;
  /** Starts a metered command in it. */
  spawn(sessionId: string, live: LiveSandbox, req: ExecRequest, opts: CallOptions): Promise<ExecHandle>;
  meter(sessionId: string, f: Partial<PendingCounts>): void;
  state(sessionId: string): Promise<SessionState | undefined>;
  /** A lifecycle pause (audited as a state change by whoever the manager names). */
  pause(sessionId: string): Promise<unknown>;
  resume(p: Principal, sessionId: string): Promise<unknown>;
}

function checkPath(path: string): string {
  if (typeof path !== 'string' || !path.startsWith('/') || path.includes('\0') || path.length > 4096) {
    throw new InvalidArgumentError('path: must be an absolute path', { details: { field: 'path' } });
  }
  return path;
}

export function sandboxAccess(m: ManagerSteps): SandboxAccess {
  return {
    async realpath(id, path, opts = {}) {
      const { d, sandboxId } = await m.live(id, opts);
      return d.realpath(sandboxId, checkPath(path), opts);
    },
    async exec(id, req, opts = {}) {
      return m.spawn(id, await m.live(id, opts), req, opts);
    },
    async readFile(id, path, opts = {}) {
      const { d, sandboxId } = await m.live(id, opts);
      return countBytes(await d.readFile(sandboxId, checkPath(path), opts), (n) => m.meter(id, { bytesOut: n }));
    },
    async writeFile(id, path, data, opts = {}) {
      const { d, sandboxId } = await m.live(id, opts);
      return d.writeFile(sandboxId, checkPath(path), countBytes(data, (n) => m.meter(id, { bytesIn: n })), opts);
    },
    async listFiles(id, path, opts = {}) {
      const { d, sandboxId } = await m.live(id, opts);
      return d.listFiles(sandboxId, checkPath(path), opts);
    },
    async stat(id, path, opts = {}) {
      const { d, sandboxId } = await m.live(id, opts);
      return d.stat(sandboxId, checkPath(path), opts);
    },
    async pauseForBreaker(id) {
      if ((await m.state(id)) !== 'running') return false;
      await m.pause(id);
      return (await m.state(id)) === 'paused';
    },
    async resume(p, id) {
      await m.resume(p, id);
    },
  };
}
