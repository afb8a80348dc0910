/**
 * A terminal in a memory sandbox, with the agent's contract (PROTOCOL.md, "Terminals") as far as a
 * built-in userland allows: a line discipline (echo, CR → "\r\n", backspace, ^C, ^D) in front of either
 * the built-in shell (the default command: a `$ ` prompt, each line run by `sh -c`, `exit [N]` ends it,
 * `stty size` answers "ROWS COLS") or the given command (lines go to its stdin). Output is CRLF, as a PTY
 * in its default mode gives it. The terminal is an ExecHandle (`handle`) so the process table keeps its
 * ring, exit and kill as for a background process.
 */
import type { ExecHandle } from '../../core/index.js';
import { MemoryExec } from './exec.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

export interface MemoryTerminalOptions {
  argv: string[];
  cols: number;
  rows: number;
  /** Starts a command in the sandbox (stdin open). */
  run: (argv: string[]) => Promise<ExecHandle>;
}

export class MemoryTerminal {
  readonly handle = new MemoryExec({ stdin: false });
  cols: number;
  rows: number;
  private line = '';
  private child: ExecHandle | null = null;
  private readonly shell: boolean;

  constructor(private readonly o: MemoryTerminalOptions) {
    this.cols = o.cols;
    this.rows = o.rows;
    this.shell = o.argv.length === 0;
    this.handle.signal.addEventListener('abort', () => void this.child?.kill(9).catch(() => undefined), { once: true });
  }

  start(): void {
    if (this.shell) return this.out('$ ');
    void this.runChild(this.o.argv).then((code) => this.handle.finish(code));
  }

  private out(s: string | Uint8Array): void {
    const text = typeof s === 'string' ? s : dec.decode(s);
    this.handle.emit('stdout', enc.encode(text.replace(/\r?\n/g, '\r\n')));
  }

  private async runChild(argv: string[]): Promise<number> {
    let h: ExecHandle;
    try {
      h = await this.o.run(argv);
    } catch (e) {
      this.out(`${argv[0]}: ${(e as Error).message}\n`);
      return 127;
    }
    this.child = h;
    for await (const ev of h) if (ev.type !== 'exit') this.out(ev.data);
    const exit = await h.wait();
    this.child = null;
    return exit.code;
  }

  /** Bytes typed: the line discipline. */
  input(data: Uint8Array): void {
    for (const ch of dec.decode(data)) {
      if (this.handle.exited) return;
      if (ch === '\r' || ch === '\n') {
        this.out('\r\n');
        const line = this.line;
        this.line = '';
        this.enter(line);
      } else if (ch === '\x7f' || ch === '\b') {
        if (this.line) (this.line = this.line.slice(0, -1)), this.out('\b \b');
      } else if (ch === '\x03') {
        this.line = '';
        this.out('^C\r\n');
        if (this.child) void this.child.kill(2);
        else if (this.shell) this.out('$ ');
      } else if (ch === '\x04') {
        if (this.child) void this.child.closeStdin();
        else if (this.shell && !this.line) this.handle.finish(0);
      } else {
        this.line += ch;
        this.out(ch);
      }
    }
  }

  private enter(line: string): void {
    if (this.child) {
      void this.child.writeStdin(enc.encode(`${line}\n`)).catch(() => undefined);
      return;
    }
    if (!this.shell) return;
    const exit = /^\s*exit(?:\s+(\d+))?\s*$/.exec(line);
    if (exit) return this.handle.finish(Number(exit[1] ?? 0));
    if (line.trim() === 'stty size') return this.out(`${this.rows} ${this.cols}\n$ `);
    if (!line.trim()) return this.out('$ ');
    void this.runChild(['sh', '-c', line]).then(() => this.out('$ '));
  }

  resize(cols: number, rows: number): void {
    this.cols = cols;
    this.rows = rows;
  }
}
