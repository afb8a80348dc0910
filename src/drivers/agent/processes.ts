/**
 * The host side of background processes (PROTOCOL.md, "Background processes"): parsing the agent's `j`
 * records, the route that streams a process's rings (`O`) with read credit like a file read, and the route
 * of a file system watch (`Y`).
 */
import { AppError, InvalidArgumentError, NotFoundError, SandboxError } from '../../core/errors.js';
import type { ExecExit, ExecRequest, ProcessInfo, ProcessOutputEvent, WatchEvent } from '../../core/sandbox.js';
import { StreamRoute } from './stream-route.js';
import { V, dec, deferred, failure, num, type Link } from './wire.js';

/** Bytes of each stream the agent keeps per background process (RING_MAX in agent.h). */
export const RING_BYTES = 1 << 20;
/** Background process records the agent keeps (BG_MAX in agent.h). */
export const MAX_PROCESSES = 32;
/** execId as the agent stores it (its tag): 1-64 printable ASCII characters without a space. */
export const TAG_RE = /^[!-~]{1,64}$/;
export const V_J = 0x6a;

/** `j <id> <tag> <pid> <state> <code> <signal> <timedOut> <startedMs> <endedMs> <outBytes> <errBytes> <argc> <arg>…` */
export function parseJob(f: string[]): ProcessInfo {
  const state = f[2];
  if (state !== 'running' && state !== 'exited') throw new SandboxError('malformed process record from the agent');
  const argc = num(f[10]);
  if (f.length !== 11 + argc) throw new SandboxError('malformed process record from the agent');
  const exit: ExecExit | null =
    state === 'exited' ? { code: num(f[3]), signal: num(f[4]) || null, timedOut: f[5] === '1' } : null;
  const endedAt = num(f[7]);
  return {
    execId: dec(f[0]).toString('utf8'),
    pid: num(f[1]),
    argv: f.slice(11).map((a) => dec(a).toString('utf8')),
    state,
    exit,
    startedAt: num(f[6]),
    endedAt: state === 'exited' ? endedAt : null,
    stdoutBytes: num(f[8]),
    stderrBytes: num(f[9]),
  };
}

/** `O`: the record first (so an unknown execId fails before any data), then o/e lines with offsets, [x], r. */
export class OutputRoute extends StreamRoute<ProcessOutputEvent> {
  readonly opened = deferred<ProcessInfo>();

  constructor(private readonly o: { id: number; execId: string; link: Link; signal?: AbortSignal }) {
    super({ id: o.id, link: o.link, signal: o.signal, what: 'a process output stream', credit: true });
  }

  onLine(verb: number, rest: Buffer): void {
    if (this.done) return;
    const f = rest.toString('latin1').split(' ');
    if (verb === V_J) {
      this.opened.resolve(parseJob(f));
    } else if (verb === V.o || verb === V.e) {
      if (!this.opened.settled) throw new SandboxError('output before the process record');
      this.push({ type: verb === V.o ? 'stdout' : 'stderr', offset: num(f[0]), data: dec(f[1]) });
    } else if (verb === V.x) {
      this.push({ type: 'exit', exit: { code: num(f[0]), signal: num(f[1]) || null, timedOut: f[2] === '1' } });
    } else if (verb === V.r) {
      if (f[0] === '0') return this.end();
      const e = failure(f);
      this.end(e.code === 'not_found' || (e.details as { errno?: string } | undefined)?.errno === 'ESRCH' ? new NotFoundError('process', this.o.execId) : e);
    }
  }

  /** The exit line is not sent against credit. */
  protected override costs(ev: ProcessOutputEvent): boolean {
    return ev.type !== 'exit';
  }

  protected failOpen(err: AppError): void {
    this.opened.reject(err);
  }
}

// ---- watches (`Y`) ----

const V_W = 0x77;
/** Events a watch keeps while nobody reads them; beyond it they are dropped and one overflow is reported. */
export const WATCH_QUEUE_MAX = 10_000;
const WATCH_EVENTS = new Set(['create', 'modify', 'delete', 'move_from', 'move_to', 'attrib', 'overflow']);

/** `Y`: `w <id> ready 0 <path>` first, then `w <id> <event> <isDir> <path>` lines until `A`. */
export class WatchRoute extends StreamRoute<WatchEvent> {
  readonly opened = deferred<void>();
  private overflowed = false;

  constructor(private readonly o: { id: number; path: string; link: Link; signal?: AbortSignal }) {
    super({ id: o.id, link: o.link, signal: o.signal, what: 'a watch', credit: false });
  }

  onLine(verb: number, rest: Buffer): void {
    if (this.done) return;
    const f = rest.toString('latin1').split(' ');
    if (verb === V_W) {
      if (f[0] === 'ready') return this.opened.resolve();
      if (!WATCH_EVENTS.has(f[0] ?? '') || (f[1] !== '0' && f[1] !== '1')) throw new SandboxError('malformed watch event from the agent');
      if (this.queued >= WATCH_QUEUE_MAX) {
        if (!this.overflowed) this.push({ type: 'overflow', path: '', isDir: false });
        this.overflowed = true;
      } else {
        this.overflowed = false;
        this.push({ type: f[0] as WatchEvent['type'], isDir: f[1] === '1', path: dec(f[2]).toString('utf8') });
      }
    } else if (verb === V.r) {
      this.end(f[0] !== '0' ? failure(f, this.o.path) : null);
    }
  }

  protected failOpen(err: AppError): void {
    this.opened.reject(err);
  }
}

// ---- checks shared by the channel's command verbs ----

export function checkTag(execId: string): void {
  if (typeof execId !== 'string' || !TAG_RE.test(execId)) {
    throw new InvalidArgumentError('execId must be 1-64 printable ASCII characters without spaces', { details: { execId } });
  }
}

export function notFoundProcess(e: unknown, execId: string): unknown {
  return e instanceof AppError && (e.details as { errno?: string } | undefined)?.errno === 'ESRCH' ? new NotFoundError('process', execId) : e;
}

export function validateExec(req: ExecRequest): void {
  const bad = (message: string, details: Record<string, unknown>): never => {
    throw new InvalidArgumentError(message, { details });
  };
  if (!Array.isArray(req.argv) || req.argv.length === 0 || !req.argv.every((a) => typeof a === 'string')) {
    bad('argv must be a non-empty array of strings', { argv: req.argv });
  }
  if (req.cwd !== undefined && (typeof req.cwd !== 'string' || (req.cwd !== '' && !req.cwd.startsWith('/')))) {
    bad('cwd must be an absolute path', { cwd: req.cwd });
  }
  const t = req.timeoutMs ?? 0;
  if (!Number.isSafeInteger(t) || t < 0) bad('timeoutMs must be a non-negative integer', { timeoutMs: t });
  for (const [k, v] of Object.entries(req.env ?? {})) {
    if (k === '' || k.includes('=') || typeof v !== 'string') bad('env keys must be non-empty without "=" and values strings', { key: k });
  }
  const strings = [...req.argv, req.cwd ?? '', ...Object.entries(req.env ?? {}).flat()];
  if (strings.some((s) => s.includes('\0'))) bad('argv, cwd and env must not contain NUL', {});
}
