import { describe, expect, it } from 'vitest';
import { canonicalJson } from './canonical.js';
import { GENESIS_HASH, hashEntry, verifyChain, type AuditEntry } from './audit.js';

describe('canonicalJson', () => {
  it('sorts keys at every depth and drops undefined', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { z: 1, y: 2 }], c: undefined } })).toBe('{"a":{"d":[1,{"y":2,"z":1}]},"b":1}');
  });
  it('refuses non-finite numbers', () => {
    expect(() => canonicalJson({ x: Number.NaN })).toThrow();
  });
});

describe('verifyChain', () => {
  const make = (n: number): AuditEntry[] => {
    const out: AuditEntry[] = [];
    let prev = GENESIS_HASH;
    for (let i = 1; i <= n; i++) {
      const body = { seq: i, ts: 1000 + i, tenantId: null, sessionId: null, principal: { kind: 'system' as const, id: 'system', tenantId: null }, action: 'x', outcome: 'ok', data: { i }, prevHash: prev };
      const e = { ...body, hash: hashEntry(body) };
      out.push(e);
      prev = e.hash;
    }
    return out;
  };
  it('accepts an intact chain', () => {
    expect(verifyChain(make(5))).toMatchObject({ ok: true, entries: 5 });
  });
  it('names an edited entry', () => {
    const c = make(5);
    (c[2] as AuditEntry).data = { i: 99 };
    expect(verifyChain(c)).toMatchObject({ ok: false, firstBadSeq: 3, problem: 'edited' });
  });
  it('names a removed entry', () => {
    const c = make(5);
    c.splice(1, 1);
    expect(verifyChain(c)).toMatchObject({ ok: false, firstBadSeq: 2, problem: 'removed' });
  });
  it('names reordered entries', () => {
    const c = make(5);
    [c[1], c[2]] = [c[2] as AuditEntry, c[1] as AuditEntry];
    expect(verifyChain(c)).toMatchObject({ ok: false, firstBadSeq: 2 });
  });
});
