import { spawn } from 'node:child_process';
import { SandboxError, TimeoutError, abortError } from '../../core/index.js';

/**
 * The only place that spawns `runsc`. Every call passes the same global flags, because runsc keeps
 * per-container state under --root and commands on one container must agree on it.
 */
export interface RunscOptions {
  /** Path of the runsc binary. Default 'runsc'. */
  binary: string;
  /** runsc --root: where runsc keeps container state. */
  root: string;
  /** 'ptrace' (default; works everywhere) or 'kvm'. */
  platform: string;
}

export interface RunscResult {
  code: number;
  stdout: string;
  stderr: string;
}

export class Runsc {
  constructor(private readonly opts: RunscOptions) {}

  globalArgs(): string[] {
    return [
      `--root=${this.opts.root}`,
      `--platform=${this.opts.platform}`,
      '--network=none',
      // Every mount gets an in-memory upper layer: the base image stays untouched, the session's
      // writes live in sandbox memory and so are part of every checkpoint.
      '--overlay2=all:memory',
    ];
  }

  /**
   * Runs one runsc command. `stdio` lets the caller donate fds (the agent FIFOs) as the container's
   * stdin/stdout; by default both are ignored.
   */
  async run(
    args: string[],
    opts: {
      signal?: AbortSignal;
      /** Fds donated as the container's stdin, stdout and stderr (run/restore). The sandbox keeps them. */
      stdio?: [number, number, number];
      timeoutMs?: number;
      allowFail?: boolean;
      /**
       * Created once runsc has exited 0. runsc runs detached and outlives a server killed meanwhile (a
       * checkpoint goes on to its end); this file tells the restarted server whether it succeeded.
       */
      doneFile?: string;
    } = {},
  ): Promise<RunscResult> {
    const signal = opts.timeoutMs ? AbortSignal.any([AbortSignal.timeout(opts.timeoutMs), ...(opts.signal ? [opts.signal] : [])]) : opts.signal;
    // A donated stderr must be a file, not a pipe of ours: the sandbox inherits it and would hold the
    // pipe open forever. runsc's own messages then land in that file, which the caller reads on failure.
    // detached: runsc runs in a session (and process group) of its own, and so does everything it forks
    // (older runsc leaves the gofer in its caller's group). A Ctrl-C or a supervisor signalling the
    // server's process group must not reach a sandbox: the sandboxes outlive the server and are re-adopted.
    const argv = [this.opts.binary, ...this.globalArgs(), ...args];
    // With a doneFile a shell waits for runsc and records its success; it exits with runsc's code.
    const [file, ...rest] = opts.doneFile ? ['/bin/sh', '-c', 'f="$1"; shift; "$@" && : > "$f"', 'berth-runsc', opts.doneFile, ...argv] : argv;
    const child = spawn(file!, rest, { stdio: opts.stdio ?? ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr?.on('data', (b: Buffer) => (stderr += b.toString()));
    // The shell's whole group (it leads one, being detached), so runsc goes with it.
    const onAbort = () => (opts.doneFile && child.pid ? killGroup(child.pid) : child.kill('SIGKILL'));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const code = await new Promise<number>((resolve, reject) => {
        child.on('error', (e) => reject(new SandboxError(`cannot run ${this.opts.binary}: ${e.message}`, { cause: e })));
        child.on('exit', (c, sig) => resolve(c ?? (sig ? 128 : 1)));
      });
      if (signal?.aborted) {
        const err = abortError(signal);
        throw err.code === 'timeout' ? new TimeoutError(`runsc ${args[0]} timed out`) : err;
      }
      if (code !== 0 && !opts.allowFail) {
        throw new SandboxError(`runsc ${args[0]} failed (exit ${code}): ${lastLines(stderr || stdout)}`, {
          details: { command: args[0], exitCode: code },
        });
      }
      return { code, stdout, stderr };
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * `runsc state`: undefined when the container does not exist (runsc says "does not exist"). Any other
   * failure throws: under load a `runsc state` of a live sandbox can fail, and reading that as "gone" made
   * recovery destroy running sessions (the orphans fault test, 1 run in 4).
   */
  async state(id: string, opts: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<{ status: string; pid: number } | undefined> {
    const r = await this.run(['state', id], { ...opts, allowFail: true });
    if (r.code !== 0) {
      if (/does not exist/.test(r.stderr)) return undefined;
      throw new SandboxError(`runsc state ${id} failed (exit ${r.code}): ${lastLines(r.stderr || r.stdout) || 'no output'}`, { retryable: true });
    }
    try {
      const s = JSON.parse(r.stdout) as { status: string; pid: number };
      return { status: s.status, pid: s.pid };
    } catch {
      throw new SandboxError(`runsc state ${id} printed no state: ${lastLines(r.stdout || r.stderr) || 'no output'}`, { retryable: true });
    }
  }

  async list(opts: { signal?: AbortSignal } = {}): Promise<Array<{ id: string; status: string }>> {
    const r = await this.run(['list', '--format=json'], opts);
    const parsed = JSON.parse(r.stdout.trim() || 'null') as Array<{ id: string; status: string }> | null;
    return (parsed ?? []).map((c) => ({ id: c.id, status: c.status }));
  }
}

function lastLines(s: string): string {
  return s.trim().split('\n').slice(-3).join(' | ').slice(0, 1000);
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}
