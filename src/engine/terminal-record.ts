/**
 * A terminal's asciicast v2 recording (https://docs.asciinema.org/manual/asciicast/v2/): a JSON header line,
 * then one `[seconds, code, data]` line per event: "o" output, "i" input typed by the controller, "r"
 * resize ("COLSxROWS"). Kept in the session's data (`<dataDir>/terminals/<sessionId>/<termId>.cast`, mode
 * 0600) and removed with the session.
 *
 * Size cap: once the file would pass `maxBytes`, one last "m" (marker) event says the recording stopped, and
 * nothing more is written; the terminal itself goes on. A sidecar `<termId>.json` keeps the output offset
 * recorded so far (written at most once a second and on close), so a recorder reopened after a server
 * restart appends what came since, not the whole ring again. A crash between two sidecar writes may repeat
 * up to a second of output in the file.
 */
import { appendFile, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Bytes a recording may take. */
export const RECORDING_MAX_BYTES = 16 << 20;
const META_EVERY_MS = 1000;

interface Meta {
  /** Terminal output offset recorded up to (exclusive). */
  offset: number;
  /** Header timestamp, ms since the epoch: event times count from it. */
  startedAt: number;
  full: boolean;
}

export class TerminalRecorder {
  private meta: Meta = { offset: 0, startedAt: 0, full: false };
  private bytes = 0;
  private chain: Promise<void> = Promise.resolve();
  private metaAt = 0;
  /** Output may split a UTF-8 sequence between two chunks. */
  private readonly dec = new TextDecoder('utf-8');
  private constructor(private readonly file: string, private readonly metaFile: string, private readonly maxBytes: number) {}

  static path(dir: string, sessionId: string, termId: string): string {
    return join(dir, sessionId, `${termId}.cast`);
  }

  /** Opens (or continues) the recording of one terminal; `header` is used only when it is new. */
  static async open(o: { dir: string; sessionId: string; termId: string; cols: number; rows: number; startedAt: number; env?: Record<string, string>; maxBytes?: number }): Promise<TerminalRecorder> {
    const file = TerminalRecorder.path(o.dir, o.sessionId, o.termId);
    const r = new TerminalRecorder(file, file.replace(/\.cast$/, '.json'), o.maxBytes ?? RECORDING_MAX_BYTES);
    await mkdir(join(o.dir, o.sessionId), { recursive: true, mode: 0o700 });
    try {
      r.meta = JSON.parse(await readFile(r.metaFile, 'utf8')) as Meta;
      r.bytes = (await stat(file)).size;
    } catch {
      const header = { version: 2, width: o.cols, height: o.rows, timestamp: Math.floor(o.startedAt / 1000), env: { TERM: o.env?.TERM ?? 'xterm-256color', SHELL: '' } };
      r.meta = { offset: 0, startedAt: Math.floor(o.startedAt / 1000) * 1000, full: false };
      const line = `${JSON.stringify(header)}\n`;
      r.bytes = Buffer.byteLength(line);
      await writeFile(file, line, { mode: 0o600 });
      await r.saveMeta();
    }
    return r;
  }

  /** Output from the terminal at stream offset `offset`; what was recorded before is skipped. */
  output(offset: number, data: Uint8Array, now: number): void {
    const end = offset + data.byteLength;
    if (end <= this.meta.offset) return;
    const fresh = data.subarray(Math.max(0, this.meta.offset - offset));
    this.meta.offset = end;
    this.event(now, 'o', this.dec.decode(fresh, { stream: true }));
  }

  input(data: Uint8Array, now: number): void {
    this.event(now, 'i', Buffer.from(data).toString('utf8'));
  }

  /** An asciicast marker ("m"): who holds input from here on, say. */
  marker(label: string, now: number): void {
    this.event(now, 'm', label);
  }

  resize(cols: number, rows: number, now: number): void {
    this.event(now, 'r', `${cols}x${rows}`);
  }

  private event(now: number, code: string, data: string): void {
    if (this.meta.full) return;
    const t = Math.max(0, (now - this.meta.startedAt) / 1000);
    let line = `${JSON.stringify([Number(t.toFixed(6)), code, data])}\n`;
    if (this.bytes + Buffer.byteLength(line) > this.maxBytes) {
      this.meta.full = true;
      line = `${JSON.stringify([Number(t.toFixed(6)), 'm', `recording stopped: ${this.maxBytes} bytes reached`])}\n`;
    }
    this.bytes += Buffer.byteLength(line);
    this.chain = this.chain.then(() => appendFile(this.file, line)).catch(() => undefined);
    if (this.meta.full || now - this.metaAt >= META_EVERY_MS) {
      this.metaAt = now;
      this.chain = this.chain.then(() => this.saveMeta()).catch(() => undefined);
    }
  }

  private saveMeta(): Promise<void> {
    return writeFile(this.metaFile, JSON.stringify(this.meta), { mode: 0o600 });
  }

  /** Waits for queued writes and saves the sidecar. */
  async flush(): Promise<void> {
    await this.chain;
    await this.saveMeta().catch(() => undefined);
  }

  static async removeSession(dir: string, sessionId: string): Promise<void> {
    await rm(join(dir, sessionId), { recursive: true, force: true });
  }
}
