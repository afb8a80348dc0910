/**
 * The host side of terminals (PROTOCOL.md, "Terminals"): `T <id> open|input|resize|list`. A terminal's output
 * and kill are those of a background process (`O`, `Z`: AgentChannel.processOutput / killProcess).
 */
import { AppError, InvalidArgumentError, InvalidStateError, NotFoundError, SandboxError } from '../../core/errors.js';
import type { CallOptions, ProcessInfo, TerminalInfo, TerminalRequest } from '../../core/sandbox.js';
import { TAG_RE, V_J, parseJob } from './processes.js';
import { CHUNK, ReplyRoute, V, asBuffer, enc, num } from './wire.js';

/** The channel's request call: sends line(id), resolves with what the route accepts. */
export type ChannelCall = <T>(line: (id: number) => string, route: ReplyRoute<T>, signal?: AbortSignal) => Promise<T>;

export class AgentTerminals {
  constructor(private readonly call: ChannelCall) {}

  /** Opens a PTY running req.argv (or the login shell) as background record termId; resolves with its pid. */
  async open(termId: string, req: TerminalRequest, opts: CallOptions = {}): Promise<{ pid: number }> {
    checkTag(termId);
    checkTerminalSize(req);
    const argv = req.argv ?? [];
    if (!argv.every((a) => typeof a === 'string')) throw new InvalidArgumentError('argv must be strings', { details: { argv } });
    const env = Object.entries(req.env ?? {});
    const route = new ReplyRoute<{ pid: number }>(undefined, (verb, f) => (verb === V.r ? { pid: num(f[1]) } : undefined));
    return this.call((id) => [
      'T', id, 'open', enc(termId), req.cols, req.rows, enc(req.cwd ?? ''), argv.length, ...argv.map(enc),
      env.length, ...env.map(([k, v]) => enc(`${k}=${v}`)),
    ].join(' ') + '\n', route, opts.signal);
  }

  /** The agent's terminals, newest first. */
  async list(opts: CallOptions = {}): Promise<TerminalInfo[]> {
    const out: TerminalInfo[] = [];
    let last: ProcessInfo | null = null;
    const route = new ReplyRoute<TerminalInfo[]>(undefined, (verb, f) => {
      if (verb === V_J) last = parseJob(f);
      if (verb === V_T) {
        if (!last) throw new SandboxError('terminal size without its record');
        out.push({ ...last, cols: num(f[0]), rows: num(f[1]) });
        last = null;
      }
      if (verb !== V.r) return undefined;
      if (num(f[1]) !== out.length) throw new SandboxError('terminal listing lost records');
      return out;
    });
    return this.call((id) => `T ${id} list\n`, route, opts.signal);
  }

  /** Queues bytes for the terminal's input (the agent holds up to 1 MiB not yet taken by the PTY). */
  async write(termId: string, data: Uint8Array, opts: CallOptions = {}): Promise<void> {
    checkTag(termId);
    for (let at = 0; at < data.byteLength || at === 0; at += CHUNK) {
      const part = data.subarray(at, at + CHUNK);
      if (!part.byteLength) return;
      const route = new ReplyRoute<true>(undefined, (verb) => (verb === V.r ? true : undefined));
      try {
        await this.call((id) => `T ${id} input ${enc(termId)} ${asBuffer(part).toString('base64')}\n`, route, opts.signal);
      } catch (e) {
        throw terminalError(e, termId);
      }
    }
  }

  /** Sets the terminal's window size (TIOCSWINSZ; SIGWINCH to its foreground group). */
  async resize(termId: string, size: { cols: number; rows: number }, opts: CallOptions = {}): Promise<void> {
    checkTag(termId);
    checkTerminalSize(size);
    const route = new ReplyRoute<true>(undefined, (verb) => (verb === V.r ? true : undefined));
    try {
      await this.call((id) => `T ${id} resize ${enc(termId)} ${size.cols} ${size.rows}\n`, route, opts.signal);
    } catch (e) {
      throw terminalError(e, termId);
    }
  }
}

function checkTag(termId: string): void {
  if (typeof termId !== 'string' || !TAG_RE.test(termId)) {
    throw new InvalidArgumentError('termId must be 1-64 printable ASCII characters without spaces', { details: { termId } });
  }
}

const V_T = 0x74;

function checkTerminalSize(s: { cols: number; rows: number }): void {
  for (const k of ['cols', 'rows'] as const) {
    const v = s[k];
    if (!Number.isInteger(v) || v < 1 || v > 1000) throw new InvalidArgumentError(`${k} must be an integer from 1 to 1000`, { details: { [k]: v } });
  }
}

function terminalError(e: unknown, termId: string): unknown {
  const errno = e instanceof AppError ? (e.details as { errno?: string } | undefined)?.errno : undefined;
  if (errno === 'ESRCH') return new NotFoundError('terminal', termId);
  if (errno === 'EPIPE') return new InvalidStateError(`terminal ${termId} has ended`, { details: { termId } });
  return e;
}
