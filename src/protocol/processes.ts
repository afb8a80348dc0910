/**
 * Wire types and schemas of background processes (issue 9 §1) and of the file verbs that go beyond one
 * file (§4: move, tar push/pull, watch). The process output stream is NDJSON like the exec stream; every
 * output line carries its stream offset and the `cursor` to resume from, so a client that reconnects with
 * `?offset=<cursor>` misses and repeats nothing.
 */
import * as z from 'zod';
import type { ProcessInfo } from '../core/sandbox.js';
import { AbsolutePath } from './schemas.js';
import type { WireError } from './types.js';
import { iso } from './views.js';

/** POST /v1/sessions/:id/exec with `background: true` answers this at once (JSON, not a stream). */
export interface BackgroundExecView {
  execId: string;
  pid: number;
}

export interface ProcessView {
  execId: string;
  pid: number;
  argv: string[];
  state: 'running' | 'exited';
  /** null while running. */
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  /** ISO 8601 (the sandbox's clock). */
  startedAt: string;
  endedAt: string | null;
  /** Bytes written to each stream since the start (the sandbox keeps the last 1 MiB of each). */
  stdoutBytes: number;
  stderrBytes: number;
}

export interface ProcessListView {
  processes: ProcessView[];
}

export interface ProcessKillView {
  execId: string;
  signal: number;
  /** false when the command had already ended (nothing was signalled). */
  signalled: boolean;
}

export function toProcessView(p: ProcessInfo): ProcessView {
  return {
    execId: p.execId,
    pid: p.pid,
    argv: [...p.argv],
    state: p.state,
    exitCode: p.exit?.code ?? null,
    signal: p.exit?.signal ?? null,
    timedOut: p.exit?.timedOut ?? false,
    startedAt: iso(p.startedAt),
    endedAt: p.endedAt === null ? null : iso(p.endedAt),
    stdoutBytes: p.stdoutBytes,
    stderrBytes: p.stderrBytes,
  };
}

/**
 * A cursor names a position in both streams: `<stdoutOffset>,<stderrOffset>` (decimal bytes since the
 * command started). `offset=N` alone means N,0.
 */
export interface ProcessCursor {
  stdout: number;
  stderr: number;
}
export const formatCursor = (c: ProcessCursor): string => `${c.stdout},${c.stderr}`;

export { decodeProcessLine, type ProcessOutputLine } from './process-lines.js';

const queryBool = z.enum(['true', 'false', '1', '0'], { error: 'must be true or false' }).transform((s) => s === 'true' || s === '1');

export const CursorSchema = z
  .string()
  .regex(/^\d{1,15}(,\d{1,15})?$/, { error: 'must be a byte offset N or a cursor N,M (stdout,stderr)' })
  .transform((s): ProcessCursor => {
    const [a, b] = s.split(',');
    return { stdout: Number(a), stderr: Number(b ?? 0) };
  });

export const ProcessOutputQuerySchema = z.object({
  follow: queryBool.optional(),
  offset: CursorSchema.optional(),
});

// ---- files (§4) ----

export interface MoveBody {
  from: string;
  to: string;
}
export const MoveBodySchema = z.strictObject({ from: AbsolutePath, to: AbsolutePath });

/** PUT/GET …/files/tar?path=DIR: a tar stream into (or of) a directory. */
export const TarQuerySchema = z.object({ path: AbsolutePath });
export interface TarPushView {
  path: string;
  /** Bytes of tar stream received. */
  bytes: number;
}
export const TAR = 'application/x-tar';

/** GET …/files/watch?path=P&recursive=: one NDJSON line per file system event. */
export const WatchQuerySchema = z.object({ path: AbsolutePath, recursive: queryBool.optional() });
export type WatchEventType = 'create' | 'modify' | 'delete' | 'move_from' | 'move_to' | 'attrib' | 'overflow';
export type WatchLine =
  | { type: 'event'; event: WatchEventType; path: string; isDir: boolean }
  | { type: 'ready' }
  | { type: 'error'; error: WireError }
  | { type: 'ping' };
