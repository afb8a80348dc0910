/**
 * The NDJSON lines of GET …/processes/:execId/output and their decoder, with no dependency but core: the SDK
 * (which must run in a browser without zod or Node built-ins) imports this module, not ./processes.js.
 */
import { AppError } from '../core/errors.js';
import type { WireError } from './types.js';

/** One NDJSON line of GET …/processes/:execId/output. `data` is base64. */
export type ProcessOutputLine =
  | { type: 'stdout' | 'stderr'; offset: number; data: string; cursor: string }
  | { type: 'exit'; code: number; signal: number | null; timedOut: boolean }
  /** The end of what the ring holds, without follow (the command still runs). */
  | { type: 'end'; cursor: string }
  | { type: 'error'; error: WireError }
  | { type: 'ping' };

export function decodeProcessLine(text: string): ProcessOutputLine {
  let o: Record<string, unknown> | null;
  try {
    o = JSON.parse(text) as Record<string, unknown> | null;
  } catch {
    throw new AppError('internal', 'malformed process output line (not JSON)');
  }
  const ok =
    !!o &&
    typeof o === 'object' &&
    (((o.type === 'stdout' || o.type === 'stderr') && typeof o.data === 'string' && typeof o.offset === 'number' && typeof o.cursor === 'string') ||
      (o.type === 'exit' && typeof o.code === 'number') ||
      (o.type === 'end' && typeof o.cursor === 'string') ||
      (o.type === 'error' && !!o.error && typeof o.error === 'object') ||
      o.type === 'ping');
  if (!ok) throw new AppError('internal', `unexpected process output line: ${text.slice(0, 200)}`);
  return o as ProcessOutputLine;
}

