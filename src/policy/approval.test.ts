import { describe, expect, it } from 'vitest';
import { argsDigest, checkApproval } from './approval.js';
import type { ApprovalRecordLike } from './types.js';

const args = { method: 'POST', url: 'https://api.example.com/orders', body: '{"qty":1}' };

function approval(over: Partial<ApprovalRecordLike> = {}): ApprovalRecordLike {
  return {
    id: 'apr_1',
    tool: 'http.request',
    argsDigest: argsDigest('http.request', args),
    status: 'approved',
    expiresAt: 10_000,
    decidedBy: 'op_alice',
    decidedAt: 500,
    usedAt: null,
    ...over,
  };
}

describe('argsDigest', () => {
  it('is SHA-256 hex, independent of key order', () => {
    const d = argsDigest('http.request', args);
    expect(d).toMatch(/^[0-9a-f]{64}$/);
    expect(argsDigest('http.request', { body: args.body, url: args.url, method: args.method })).toBe(d);
  });

  it('changes when one argument or the tool changes', () => {
    const d = argsDigest('http.request', args);
    expect(argsDigest('http.request', { ...args, body: '{"qty":2}' })).not.toBe(d);
    expect(argsDigest('http.request', { ...args, extra: true })).not.toBe(d);
    expect(argsDigest('http.other', args)).not.toBe(d);
  });
});

describe('checkApproval', () => {
  it('matches the approved call once, in time', () => {
    expect(checkApproval(approval(), 'http.request', args, 1000).status).toBe('match');
  });
  it('mismatches on any changed argument or another tool', () => {
    expect(checkApproval(approval(), 'http.request', { ...args, body: '{"qty":2}' }, 1000)).toEqual({ status: 'mismatch', field: 'args' });
    expect(checkApproval(approval(), 'shell.exec', args, 1000)).toEqual({ status: 'mismatch', field: 'tool' });
  });
  it('expires: at expiresAt, pending or approved-but-unused', () => {
    expect(checkApproval(approval(), 'http.request', args, 10_000).status).toBe('expired');
    expect(checkApproval(approval({ status: 'pending', decidedBy: null, decidedAt: null }), 'http.request', args, 20_000).status).toBe('expired');
    expect(checkApproval(approval({ expiresAt: null }), 'http.request', args, 1e15).status).toBe('match');
  });
  it('reports pending, denied and used', () => {
    expect(checkApproval(approval({ status: 'pending', decidedBy: null }), 'http.request', args, 1000).status).toBe('pending');
    expect(checkApproval(approval({ status: 'denied' }), 'http.request', args, 1000)).toEqual({ status: 'denied', by: 'op_alice' });
    expect(checkApproval(approval({ usedAt: 900 }), 'http.request', args, 1000)).toEqual({ status: 'used', at: 900 });
  });
});
