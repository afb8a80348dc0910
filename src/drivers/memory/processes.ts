/**
 * Background processes of a memory sandbox, with the agent's contract (PROTOCOL.md, "Background
 * processes"): a record per command with the last `ringBytes` of each stream, offsets counted from the
 * command's start, at most `max` records (the oldest finished one goes first), output replayed then
 * followed live. A checkpoint carries the records (a running one is saved as killed: the memory driver
 * does not carry live commands, `liveMemory: false`).
 */
import type { MemoryFs } from './fs.js';
import { AppError, NotFoundError, abortError, type WatchEvent, type ExecExit, type ExecHandle, type ProcessInfo, type ProcessOutputEvent, type ProcessOutputOptions, type TerminalInfo } from '../../core/index.js';

/** The last `cap` bytes of a stream; offsets count every byte ever appended. */
export class Ring {
  private buf: Uint8Array | null = null;
  /** Every byte ever appended (the next offset). */
  total = 0;
  /** The lowest offset still held. */
  start = 0;
  constructor(private readonly cap: number) {}
  append(d: Uint8Array): void {
    let src = d;
    if (src.byteLength > this.cap) {
      this.total += src.byteLength - this.cap;
      src = src.subarray(src.byteLength - this.cap);
    }
    this.buf ??= new Uint8Array(this.cap);
    const at = this.total % this.cap;
    const first = Math.min(this.cap - at, src.byteLength);
    this.buf.set(src.subarray(0, first), at);
    this.buf.set(src.subarray(first), 0);
    this.total += src.byteLength;
    this.start = Math.max(this.start, this.total - this.cap);
  }
  /** Starts an empty ring at offset (a ring read back from an image). */
  seek(offset: number): void {
    this.total = this.start = offset;
  }
  /** Up to max bytes from offset (clamped to what the ring holds), without crossing the wrap point. */
  slice(offset: number, max: number): { offset: number; data: Uint8Array } {
    const off = Math.max(offset, this.start);
    if (off >= this.total || !this.buf) return { offset: off, data: new Uint8Array(0) };
    const at = off % this.cap;
    const n = Math.min(max, this.total - off, this.cap - at);
    return { offset: off, data: this.buf.slice(at, at + n) };
  }
}

export interface ProcRecord {
  info: ProcessInfo;
  out: Ring;
  err: Ring;
  /** Set for a terminal: its window size (the agent's `pty` records). */
  terminal?: { cols: number; rows: number };
}

const CHUNK = 48 * 1024;

export class ProcessTable {
  /** Newest first, as the agent lists them. */
  readonly records: ProcRecord[] = [];
  private readonly handles = new Map<string, ExecHandle>();
  private readonly waiters = new Set<() => void>();

  constructor(private readonly o: { ringBytes: number; max: number; now: () => number }) {}

  /** Room for one more record, or the agent's EAGAIN when every record holds a running command. */
  admit(execId: string): void {
    if (this.records.some((r) => r.info.execId === execId)) throw new AppError('conflict', `background: tag ${execId} in use`);
    if (this.records.length < this.o.max) return;
    const i = this.records.map((r) => r.info.state).lastIndexOf('exited');
    if (i < 0) throw new AppError('unavailable', 'background: all records hold running processes', { retryable: true });
    this.records.splice(i, 1);
  }

  /** Takes over a started command: its output fills the rings from now on. */
  add(execId: string, argv: string[], pid: number, h: ExecHandle, terminal?: { cols: number; rows: number }): void {
    const rec: ProcRecord = {
      terminal,
      info: { execId, pid, argv: [...argv], state: 'running', exit: null, startedAt: this.o.now(), endedAt: null, stdoutBytes: 0, stderrBytes: 0 },
      out: new Ring(this.o.ringBytes),
      err: new Ring(this.o.ringBytes),
    };
    this.records.unshift(rec);
    this.handles.set(execId, h);
    void (async () => {
      for await (const ev of h) {
        if (ev.type === 'exit') break;
        (ev.type === 'stdout' ? rec.out : rec.err).append(ev.data);
        this.poke();
      }
      this.ended(rec, await h.wait());
    })();
  }

  private ended(rec: ProcRecord, exit: ExecExit): void {
    this.handles.delete(rec.info.execId);
    rec.info = { ...rec.info, state: 'exited', exit, endedAt: this.o.now() };
    this.poke();
  }

  private poke(): void {
    for (const w of [...this.waiters]) w();
  }

  list(): ProcessInfo[] {
    return this.records.filter((r) => !r.terminal).map((r) => this.view(r));
  }

  listTerminals(): TerminalInfo[] {
    return this.records.flatMap((r) => (r.terminal ? [{ ...this.view(r), ...r.terminal }] : []));
  }

  /** A terminal's record (NotFoundError when termId names none). */
  terminal(termId: string): ProcRecord & { terminal: { cols: number; rows: number } } {
    const r = this.records.find((x) => x.info.execId === termId && x.terminal);
    if (!r) throw new NotFoundError('terminal', termId);
    return r as ProcRecord & { terminal: { cols: number; rows: number } };
  }

  private view(r: ProcRecord): ProcessInfo {
    return { ...r.info, argv: [...r.info.argv], stdoutBytes: r.out.total, stderrBytes: r.err.total };
  }

  private get(execId: string): ProcRecord {
    const r = this.records.find((x) => x.info.execId === execId);
    if (!r) throw new NotFoundError('process', execId);
    return r;
  }

  async kill(execId: string, signal: number): Promise<boolean> {
    const r = this.get(execId);
    const h = this.handles.get(execId);
    if (r.info.state === 'exited' || !h) return false;
    await h.kill(signal);
    return true;
  }

  output(execId: string, opts: ProcessOutputOptions): AsyncIterable<ProcessOutputEvent> {
    const rec = this.get(execId);
    const off = [opts.stdoutOffset ?? 0, opts.stderrOffset ?? 0];
    const table = this;
    return (async function* () {
      let turn = 0;
      for (;;) {
        let sent = false;
        for (const s of [turn, 1 - turn]) {
          const { offset, data } = (s === 0 ? rec.out : rec.err).slice(off[s]!, CHUNK);
          if (!data.byteLength) continue;
          off[s] = offset + data.byteLength;
          turn = 1 - s;
          sent = true;
          yield { type: s === 0 ? 'stdout' : 'stderr', offset, data } as ProcessOutputEvent;
          break;
        }
        if (sent) continue;
        if (rec.info.state === 'exited') {
          yield { type: 'exit', exit: rec.info.exit! } as ProcessOutputEvent;
          return;
        }
        if (!opts.follow) return;
        await new Promise<void>((res, rej) => {
          const signal = opts.signal;
          const w = (): void => {
            table.waiters.delete(w);
            signal?.removeEventListener('abort', w);
            if (signal?.aborted) rej(abortError(signal));
            else res();
          };
          if (signal?.aborted) return w();
          table.waiters.add(w);
          signal?.addEventListener('abort', w, { once: true });
        });
      }
    })();
  }

  /** The records as a checkpoint keeps them: running ones as killed (SIGKILL), since commands do not carry over. */
  snapshot(): Array<{ info: ProcessInfo; out: { offset: number; data: Uint8Array }; err: { offset: number; data: Uint8Array }; terminal?: { cols: number; rows: number } }> {
    return this.records.map((r) => ({
      ...(r.terminal ? { terminal: { ...r.terminal } } : {}),
      info: r.info.state === 'running' ? { ...r.info, state: 'exited', exit: { code: 137, signal: 9, timedOut: false }, endedAt: this.o.now() } : r.info,
      out: { offset: r.out.start, data: concatRing(r.out) },
      err: { offset: r.err.start, data: concatRing(r.err) },
    }));
  }

  load(saved: ReturnType<ProcessTable['snapshot']>): void {
    for (const s of saved) {
      const out = new Ring(this.o.ringBytes);
      const err = new Ring(this.o.ringBytes);
      out.seek(s.out.offset);
      err.seek(s.err.offset);
      this.records.push({ info: s.info, out: refill(out, s.out.data), err: refill(err, s.err.data), ...(s.terminal ? { terminal: { ...s.terminal } } : {}) });
    }
  }
}

function concatRing(r: Ring): Uint8Array {
  const parts: Uint8Array[] = [];
  for (let off = r.start; off < r.total; ) {
    const { data } = r.slice(off, Number.MAX_SAFE_INTEGER);
    parts.push(data);
    off += data.byteLength;
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) out.set(p, (at += p.byteLength) - p.byteLength);
  return out;
}

function refill(r: Ring, data: Uint8Array): Ring {
  r.append(data);
  return r;
}

/** The memory driver's watch: events of changes in the tree at root (direct children only, unless recursive). */
export function watchTree(fs: MemoryFs, root: string, recursive: boolean, signal?: AbortSignal): AsyncIterable<WatchEvent> {
  const queue: WatchEvent[] = [];
  let wake: (() => void) | null = null;
  const under = (p: string) => {
    if (p === root) return true;
    const rel = p.startsWith(root === '/' ? '/' : `${root}/`) ? p.slice(root === '/' ? 1 : root.length + 1) : null;
    return rel !== null && (recursive || !rel.includes('/'));
  };
  const w = (ev: WatchEvent) => {
    if (!under(ev.path)) return;
    queue.push(ev);
    wake?.();
  };
  fs.watchers.add(w); // in place before this returns: later changes are seen
  return (async function* () {
    try {
      for (;;) {
        const ev = queue.shift();
        if (ev) {
          yield ev;
          continue;
        }
        await new Promise<void>((res, rej) => {
          if (signal?.aborted) return rej(abortError(signal));
          const onAbort = () => rej(abortError(signal!));
          signal?.addEventListener('abort', onAbort, { once: true });
          wake = () => {
            signal?.removeEventListener('abort', onAbort);
            wake = null;
            res();
          };
        });
      }
    } finally {
      fs.watchers.delete(w);
    }
  })();
}
