/** The exec NDJSON stream: one JSON object per line, byte payloads in base64. */
import { AppError } from '../core/errors.js';
import type { ExecStreamLine } from './types.js';

export const NDJSON = 'application/x-ndjson';

/** A quiet exec stream carries a `ping` line this often (ms); clients ignore it. */
export const EXEC_HEARTBEAT_MS = 15_000;

export function encodeExecLine(line: ExecStreamLine): string {
  return `${JSON.stringify(line)}\n`;
}

// Web-platform base64 (atob/btoa), so the SDK runs in browsers too; the server encodes with its own.
const CHUNK = 0x8000;

export function bytesToBase64(data: Uint8Array): string {
  let bin = '';
  for (let i = 0; i < data.length; i += CHUNK) bin += String.fromCharCode(...data.subarray(i, i + CHUNK));
  return btoa(bin);
}

export function base64ToBytes(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Parses and checks one line; throws AppError('internal') on anything the server never sends. */
export function decodeExecLine(text: string): ExecStreamLine {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new AppError('internal', 'malformed exec stream line (not JSON)');
  }
  const o = v as Record<string, unknown> | null;
  const ok =
    !!o &&
    typeof o === 'object' &&
    ((o.type === 'started' && typeof o.execId === 'string') ||
      ((o.type === 'stdout' || o.type === 'stderr') && typeof o.data === 'string') ||
      (o.type === 'exit' && typeof o.code === 'number' && typeof o.timedOut === 'boolean') ||
      (o.type === 'error' && !!o.error && typeof o.error === 'object') ||
      o.type === 'ping');
  if (!ok) throw new AppError('internal', `unexpected exec stream line: ${text.slice(0, 200)}`);
  return o as ExecStreamLine;
}
