/**
 * Per-tenant quotas (issue 12 §3): what a tenant uses, worked out from its records, and the one check
 * that refuses a request over a limit with 429 `quota_exceeded` naming the limit and the current use.
 * Pure: the engine loads the records and calls these.
 */
import { AppError, ConfigError, InvalidArgumentError, type SessionRecord, type SessionState, type SnapshotRecord, type TenantQuotas } from '../core/index.js';

export const GIB = 2 ** 30;

/** States in which a session counts toward maxSessions. */
const COUNTED: ReadonlySet<SessionState> = new Set(['creating', 'running', 'paused', 'hibernating', 'hibernated', 'waking']);
/** States in which a session holds a machine, so its memory counts toward maxMemoryMb. */
const HOLDS_MEMORY: ReadonlySet<SessionState> = new Set(['creating', 'running', 'paused', 'hibernating', 'waking']);

export const QUOTA_FIELDS = ['maxSessions', 'maxMemoryMb', 'maxSnapshotGb', 'maxEgressGb'] as const satisfies ReadonlyArray<keyof TenantQuotas>;

/**
 * Defaults when the server is given none: a small machine's worth (compose.ts derives them from the host:
 * its memory and the data directory's disk).
 */
export const DEFAULT_QUOTAS: TenantQuotas = Object.freeze({ maxSessions: 256, maxMemoryMb: 16384, maxSnapshotGb: 100, maxEgressGb: 1024 });

export interface TenantUsage {
  sessions: number;
  memoryMb: number;
  snapshotBytes: number;
  egressBytes: number;
}

export function tenantUsage(sessions: readonly SessionRecord[], snapshots: readonly SnapshotRecord[]): TenantUsage {
  let n = 0;
  let mem = 0;
  let egress = 0;
  for (const s of sessions) {
    if (COUNTED.has(s.state)) n++;
    if (HOLDS_MEMORY.has(s.state)) mem += s.settings.memoryMb;
    egress += (s.metering.egressBytesOut ?? 0) + (s.metering.egressBytesIn ?? 0);
  }
  return { sessions: n, memoryMb: mem, snapshotBytes: snapshots.reduce((a, s) => a + s.sizeBytes, 0), egressBytes: egress };
}

/** The limits in force: the tenant's own, else the server's defaults. */
export function effectiveQuotas(own: Partial<TenantQuotas> | undefined, defaults: TenantQuotas): TenantQuotas {
  return { ...defaults, ...own };
}

/** Validates a root's change; throws invalid_argument naming the field. Integers for counts and MiB; GB may be fractional. */
export function checkQuotaInput(input: Partial<Record<keyof TenantQuotas, unknown>>): Partial<TenantQuotas> {
  const out: Partial<TenantQuotas> = {};
  for (const k of QUOTA_FIELDS) {
    const v = input[k];
    if (v === undefined) continue;
    const integer = k === 'maxSessions' || k === 'maxMemoryMb';
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || (integer && !Number.isInteger(v))) {
      throw new InvalidArgumentError(`${k}: must be ${integer ? 'an integer' : 'a number'} ≥ 0`, { details: { field: k } });
    }
    out[k] = v;
  }
  return out;
}

export function validateQuotaDefaults(q: TenantQuotas): TenantQuotas {
  try {
    return Object.freeze({ ...(checkQuotaInput(q) as TenantQuotas) });
  } catch (e) {
    throw new ConfigError(`quota defaults: ${(e as Error).message}`);
  }
}

/** What a request would add. */
export interface QuotaAsk {
  sessions?: number;
  memoryMb?: number;
  snapshotBytes?: number;
  /** Egress is checked as "still under the limit" (the bytes of a connection are not known in advance). */
  egress?: boolean;
}

/** Throws 429 quota_exceeded for the first limit the ask would pass, with the limit, the use and the ask. */
export function checkQuota(limits: TenantQuotas, use: TenantUsage, ask: QuotaAsk): void {
  const over = (limit: keyof TenantQuotas, max: number, current: number, requested: number, unit: string): never => {
    throw new AppError('quota_exceeded', `${limit} is ${max}${unit}; the tenant uses ${round(current)}${unit} and this request needs ${round(requested)}${unit} more`, {
      details: { limit, max, current: round(current), requested: round(requested) },
    });
  };
  if (ask.sessions && use.sessions + ask.sessions > limits.maxSessions) over('maxSessions', limits.maxSessions, use.sessions, ask.sessions, '');
  if (ask.memoryMb && use.memoryMb + ask.memoryMb > limits.maxMemoryMb) over('maxMemoryMb', limits.maxMemoryMb, use.memoryMb, ask.memoryMb, ' MiB');
  if (ask.snapshotBytes !== undefined && (use.snapshotBytes + ask.snapshotBytes) / GIB > limits.maxSnapshotGb) {
    over('maxSnapshotGb', limits.maxSnapshotGb, use.snapshotBytes / GIB, ask.snapshotBytes / GIB, ' GiB');
  }
  if (ask.egress && use.egressBytes / GIB >= limits.maxEgressGb) over('maxEgressGb', limits.maxEgressGb, use.egressBytes / GIB, 0, ' GiB');
}

function round(x: number): number {
  return Number.isInteger(x) ? x : Math.round(x * 1e6) / 1e6;
}
