/**
 * Background processes of a session (issue 9 §1): started with `exec --background`, kept by the sandbox
 * itself (the agent's rings), so they outlive every stream, hibernate, wake and a server restart. The
 * engine holds nothing about them: the execId is handed to the sandbox at start, and every call asks the
 * sandbox. These are operator calls (agent tokens are refused, as for exec): an agent reaches commands
 * only through the gated tools.
 *
 * Kept apart from manager.ts: the manager lends its steps (live sandbox, audit, metering) through
 * ProcessSteps, as sandbox-access.ts does for the gate.
 */
import {
  InvalidArgumentError,
  NotFoundError,
  isId,
  newId,
  type CallOptions,
  type ExecRequest,
  type Principal,
  type ProcessInfo,
  type ProcessOutputEvent,
  type SandboxDriver,
} from '../core/index.js';
import type { PendingCounts } from './metering.js';

export interface ProcessSteps {
  /** The running sandbox of a session for an operator (wakes a hibernated one); refuses agent tokens. */
  live(p: Principal, sessionId: string, opts: CallOptions): Promise<{ tenantId: string; d: SandboxDriver; sandboxId: string }>;
  audit(p: Principal, tenantId: string, sessionId: string, action: string, data: Record<string, unknown>): Promise<unknown>;
  meter(sessionId: string, f: Partial<PendingCounts>): void;
}

export interface ProcessOutputRequest extends CallOptions {
  /** Keep streaming until the command ends. Default false: what the rings hold now. */
  follow?: boolean;
  /** Byte offsets to start from (default 0: the oldest bytes still held). */
  stdoutOffset?: number;
  stderrOffset?: number;
}

export interface ProcessService {
  /** Starts a background command; resolves with its execId and pid as soon as it is forked. */
  start(p: Principal, sessionId: string, req: ExecRequest, opts?: CallOptions): Promise<{ execId: string; pid: number }>;
  /** Running and finished background commands, newest first. */
  list(p: Principal, sessionId: string, opts?: CallOptions): Promise<ProcessInfo[]>;
  get(p: Principal, sessionId: string, execId: string, opts?: CallOptions): Promise<ProcessInfo>;
  /** Replays the rings from the offsets, then (follow) live output; ends with an exit event once ended. */
  output(p: Principal, sessionId: string, execId: string, opts?: ProcessOutputRequest): Promise<AsyncIterable<ProcessOutputEvent>>;
  /** Signals the command's process group; `signalled` false when it had already ended. */
  kill(p: Principal, sessionId: string, execId: string, opts?: CallOptions & { signalNumber?: number }): Promise<{ signalled: boolean }>;
}

/** Unknown or malformed ids are not found, as for any id a caller cannot see. */
function checkExecId(execId: string): string {
  if (typeof execId !== 'string' || !isId('exec', execId)) throw new NotFoundError('process', String(execId));
  return execId;
}

export function processService(m: ProcessSteps): ProcessService {
  return {
    async start(p, sessionId, req, opts = {}) {
      if (req.stdin) throw new InvalidArgumentError('stdin: a background command has no stdin', { details: { field: 'stdin' } });
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      const execId = newId('exec');
      const { pid } = await d.startProcess(sandboxId, execId, { ...req, stdin: false }, opts);
      m.meter(sessionId, { execCount: 1 });
      await m.audit(p, tenantId, sessionId, 'session.exec', { execId, argv: req.argv, cwd: req.cwd ?? null, timeoutMs: req.timeoutMs ?? null, background: true, pid });
      return { execId, pid };
    },

    async list(p, sessionId, opts = {}) {
      const { d, sandboxId } = await m.live(p, sessionId, opts);
      return d.listProcesses(sandboxId, opts);
    },

    async get(p, sessionId, execId, opts = {}) {
      checkExecId(execId);
      const { d, sandboxId } = await m.live(p, sessionId, opts);
      const found = (await d.listProcesses(sandboxId, opts)).find((x) => x.execId === execId);
      if (!found) throw new NotFoundError('process', execId);
      return found;
    },

    async output(p, sessionId, execId, opts = {}) {
      checkExecId(execId);
      const { d, sandboxId } = await m.live(p, sessionId, opts);
      const src = await d.processOutput(sandboxId, execId, opts);
      return (async function* () {
        for await (const ev of src) {
          if (ev.type !== 'exit') m.meter(sessionId, { bytesOut: ev.data.byteLength });
          yield ev;
        }
      })();
    },

    async kill(p, sessionId, execId, opts = {}) {
      checkExecId(execId);
      const { tenantId, d, sandboxId } = await m.live(p, sessionId, opts);
      const signalled = await d.killProcess(sandboxId, execId, opts);
      await m.audit(p, tenantId, sessionId, 'session.exec.kill', { execId, signal: opts.signalNumber ?? 15, signalled });
      return { signalled };
    },
  };
}
