import { describe, expect, it } from 'vitest';
import { AppError, ERROR_CODES, NotFoundError, emptyMetering, type SessionRecord, type SnapshotRecord } from '../core/index.js';
import {
  CreateSessionBodySchema,
  ExecBodySchema,
  decodeExecLine,
  encodeExecLine,
  fromWireError,
  httpStatus,
  parseInput,
  toSessionView,
  toSnapshotView,
  toWireError,
} from './index.js';

describe('errors', () => {
  it('maps every code to its status', () => {
    const expected: Record<string, number> = {
      invalid_argument: 400,
      payload_too_large: 413,
      no_space: 507,
      port_closed: 502,
      quota_exceeded: 429,
      rate_limited: 429,
      unauthenticated: 401,
      forbidden: 403,
      policy_denied: 403,
      not_found: 404,
      invalid_state: 409,
      conflict: 409,
      timeout: 504,
      cancelled: 499,
      result_invalid: 502,
      unavailable: 503,
      sandbox_failed: 503,
      config: 500,
      internal: 500,
      idempotency_mismatch: 422,
    };
    for (const code of ERROR_CODES) expect(httpStatus(code), code).toBe(expected[code]);
  });
  it('round-trips an AppError through the wire with its code and details', () => {
    for (const code of ERROR_CODES) {
      const e = new AppError(code, `boom ${code}`, { details: { field: 'x' } });
      const back = fromWireError({ error: toWireError(e) }, httpStatus(code));
      expect(back).toBeInstanceOf(AppError);
      expect(back.code).toBe(code);
      expect(back.message).toBe(`boom ${code}`);
      expect(back.details?.field).toBe('x');
    }
    const nf = fromWireError({ error: toWireError(new NotFoundError('session', 'ses_x')) }, 404);
    expect(nf.details).toMatchObject({ kind: 'session', id: 'ses_x' });
  });
  it('hides anything that is not an AppError', () => {
    const w = toWireError(new Error('secret /etc/shadow'));
    expect(w).toEqual({ code: 'internal', message: 'internal error' });
  });
  it('keeps retryable', () => {
    expect(toWireError(new AppError('timeout', 't', { retryable: true })).retryable).toBe(true);
    expect(fromWireError({ error: { code: 'unavailable', message: 'x' } }, 503).retryable).toBe(true);
  });
  it('falls back on the status when the body is not ours', () => {
    expect(fromWireError('<html>bad gateway</html>', 502).code).toBe('unavailable');
    expect(fromWireError(undefined, 404).code).toBe('not_found');
    expect(fromWireError({ error: { code: 'weird', message: 'm' } }, 409).code).toBe('conflict');
    expect(fromWireError(null, 418).code).toBe('internal');
  });
});

describe('validation', () => {
  const fail = (schema: Parameters<typeof parseInput>[0], v: unknown) => {
    try {
      parseInput(schema, v);
    } catch (e) {
      return e as AppError;
    }
    throw new Error('expected a failure');
  };
  it('names the field path in the message and details', () => {
    const e = fail(CreateSessionBodySchema, { memoryMb: 10 });
    expect(e.code).toBe('invalid_argument');
    expect(e.message).toBe('memoryMb: must be ≥ 64');
    expect(e.details).toMatchObject({ field: 'memoryMb', path: ['memoryMb'] });
    expect(fail(CreateSessionBodySchema, { cpus: 100 }).message).toBe('cpus: must be ≤ 64');
    expect(fail(ExecBodySchema, { argv: ['a', 1] }).details?.field).toBe('argv.1');
    expect(fail(ExecBodySchema, {}).message).toBe('argv: is required');
    expect(fail(CreateSessionBodySchema, { extra: 1 }).message).toBe('extra: unknown field');
  });
  it('accepts the documented bounds', () => {
    expect(parseInput(CreateSessionBodySchema, { memoryMb: 64, cpus: 0.1, idleTimeoutS: 604800, backend: 'qemu' })).toMatchObject({ memoryMb: 64 });
    expect(parseInput(CreateSessionBodySchema, { memoryMb: 16384, cpus: 64, idleTimeoutS: 0 })).toMatchObject({ cpus: 64 });
    expect(parseInput(ExecBodySchema, { argv: ['ls'], timeoutMs: 86_400_000 })).toMatchObject({ timeoutMs: 86_400_000 });
  });
});

const T0 = Date.UTC(2030, 0, 1);
function record(): SessionRecord {
  return {
    id: 'ses_a',
    tenantId: 'ten_a',
    backend: 'gvisor',
    state: 'paused',
    objective: null,
    settings: { memoryMb: 512, cpus: 1, idleTimeoutS: 0, env: { A: 'b' } },
    metadata: {},
    sandboxId: 'sbx-secret',
    identity: { hostname: 'h', machineId: '0'.repeat(32), generation: 0, reason: 'create' },
    hibernationSnapshotId: 'snp_internal',
    parentSnapshotId: null,
    failureReason: null,
    agentTokenHash: 'f'.repeat(64),
    createdAt: T0,
    updatedAt: T0 + 1000,
    stateSince: T0 + 10_000,
    lastActivityAt: T0 + 5000,
    metering: { ...emptyMetering(), stateSeconds: { running: 10, paused: 1.5 } },
  };
}

describe('views', () => {
  it('session: ISO times, current state time included, no secrets', () => {
    const v = toSessionView(record(), T0 + 12_250);
    expect(v.createdAt).toBe('2030-01-01T00:00:00.000Z');
    expect(v.stateSince).toBe('2030-01-01T00:00:10.000Z');
    expect(v.metering.stateSeconds).toEqual({ running: 10, paused: 3.75 });
    const text = JSON.stringify(v);
    expect(text).not.toContain('agentTokenHash');
    expect(text).not.toContain('sbx-secret');
    expect(text).not.toContain('sandboxId');
    expect(v.hostname).toBe('h');
  });
  it('snapshot: snapshotId and id', () => {
    const r: SnapshotRecord = { id: 'snp_a', tenantId: 't', sessionId: 'ses_a', kind: 'named', name: null, backend: 'qemu', settings: record().settings, sizeBytes: 9, createdAt: T0 };
    expect(toSnapshotView(r)).toMatchObject({ snapshotId: 'snp_a', id: 'snp_a', backend: 'qemu', createdAt: '2030-01-01T00:00:00.000Z' });
  });
});

describe('exec lines', () => {
  it('round-trip and reject junk', () => {
    const l = { type: 'exit', code: 1, signal: null, timedOut: false } as const;
    expect(decodeExecLine(encodeExecLine(l).trim())).toEqual(l);
    expect(() => decodeExecLine('{"type":"nope"}')).toThrow(AppError);
    expect(() => decodeExecLine('not json')).toThrow(AppError);
  });
});
