/**
 * The executor's types: what the gate hands an allowed call to (ExecContext, ExecLimits), what comes back
 * (ExecOutcome), and the narrow surface of SessionManager the executors reach the sandbox through
 * (SandboxAccess). Kept apart from the executors themselves (tools-exec.ts, tools-http.ts) so neither has
 * to import the other for a type.
 */
import type { CallOptions, DesktopSettings, ExecHandle, ExecRequest, FileEntry, FileStat, Principal } from '../core/index.js';

/** The narrow surface of SessionManager the gate uses. Calls wake a hibernated session; none audits by itself. */
export interface SandboxAccess {
  realpath(sessionId: string, path: string, opts?: CallOptions): Promise<string>;
  exec(sessionId: string, req: ExecRequest, opts?: CallOptions): Promise<ExecHandle>;
  readFile(sessionId: string, path: string, opts?: CallOptions): Promise<AsyncIterable<Uint8Array>>;
  writeFile(sessionId: string, path: string, data: AsyncIterable<Uint8Array>, opts?: CallOptions): Promise<number>;
  listFiles(sessionId: string, path: string, opts?: CallOptions): Promise<FileEntry[]>;
  stat(sessionId: string, path: string, opts?: CallOptions): Promise<FileStat>;
  /** Pauses a running session (audited as a lifecycle change by the system). False when it was not running. */
  pauseForBreaker(sessionId: string): Promise<boolean>;
  /** Resumes a paused session on behalf of `p` (the operator who reset the breaker). */
  resume(p: Principal, sessionId: string): Promise<void>;
}

export type ExecOutcome = { output: unknown; outputError?: undefined } | { output?: undefined; outputError: string };

export interface ExecLimits {
  /**
   * Bytes kept of stdout and of stderr (each) and of a file read. Past it shell.exec keeps the first and
   * last halves (truncated: true); a file read or an operator tool's output is refused.
   */
  outputCapBytes: number;
  /** Entries of fs.list kept; beyond it the result is refused. */
  listCap: number;
  /** shell.exec without timeoutMs (and command tools without one) is killed after this, ms. */
  defaultTimeoutMs: number;
  /** http.request deadline, ms. */
  httpTimeoutMs: number;
  /** http.request response body cap, bytes. */
  httpMaxBytes: number;
}

export interface ExecContext {
  sessionId: string;
  sandboxes: SandboxAccess;
  limits: ExecLimits;
  /** http.request: the session's egress allow-list and range allowances (policy/egress.ts). */
  httpAllow: readonly string[];
  egressAllowCidr?: readonly string[];
  /** The session's desktop screen (the computer tool), null without a desktop. */
  screen: DesktopSettings | null;
  /** Keeps a screenshot the computer tool returns (engine/screenshots.ts). Default: not kept. */
  keepScreenshot?: (png: Buffer) => Promise<void>;
  /** Name resolution for http.request; default dns.lookup. */
  resolve?: (host: string) => Promise<string[]>;
  signal?: AbortSignal;
  /** Paths the call was decided on as written: its first sandbox operation runs under this guard (CallOptions.guard). */
  guard?: readonly string[];
}
