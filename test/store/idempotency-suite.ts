/** Idempotency-Key rows (issue 7 §11): what every store must do, part of the store conformance suite. */
import { expect, it } from 'vitest';
import type { IdempotencyRecord } from '../../src/core/idempotency.js';
import type { Store } from '../../src/core/store.js';

function row(over: Partial<IdempotencyRecord> = {}): IdempotencyRecord {
  return { tenantId: 'ten_a', scope: 'POST /v1/sessions', key: 'k1', fingerprint: 'f1', state: 'started', owner: 'p1', created: [], createdAt: 100, expiresAt: 200, ...over };
}

export function idempotencyCases(store: () => Store): void {
  it('claim inserts once per tenant, scope and key; a second claim reads the first', async () => {
    const s = store();
    expect(await s.idempotency.claim(row(), 100)).toBeUndefined();
    expect(await s.idempotency.claim(row({ fingerprint: 'f2', owner: 'p2' }), 150)).toEqual(row());
    // Another tenant, another scope: their own rows.
    expect(await s.idempotency.claim(row({ tenantId: 'ten_b' }), 100)).toBeUndefined();
    expect(await s.idempotency.claim(row({ scope: 'POST /v1/snapshots/:snapshot/fork' }), 100)).toBeUndefined();
    expect(await s.idempotency.get('ten_a', 'POST /v1/sessions', 'nope')).toBeUndefined();
  });

  it('two claims racing: exactly one inserts', async () => {
    const s = store();
    const results = await Promise.all([1, 2, 3, 4].map((i) => s.idempotency.claim(row({ owner: `p${i}` }), 100)));
    expect(results.filter((r) => r === undefined)).toHaveLength(1);
  });

  it('an expired row is replaced on claim and swept by deleteExpired', async () => {
    const s = store();
    await s.idempotency.claim(row(), 100);
    await s.idempotency.claim(row({ key: 'k2', expiresAt: 500 }), 100);
    expect(await s.idempotency.claim(row({ owner: 'p2', createdAt: 200, expiresAt: 300 }), 200)).toBeUndefined();
    expect((await s.idempotency.get('ten_a', 'POST /v1/sessions', 'k1'))?.owner).toBe('p2');
    expect(await s.idempotency.deleteExpired(300)).toBe(1);
    expect(await s.idempotency.get('ten_a', 'POST /v1/sessions', 'k1')).toBeUndefined();
    expect(await s.idempotency.get('ten_a', 'POST /v1/sessions', 'k2')).toBeDefined();
  });

  it('noteCreated, complete and release act only on a started row of the owner', async () => {
    const s = store();
    const r = row();
    await s.idempotency.claim(r, 100);
    await s.idempotency.noteCreated(r.tenantId, r.scope, r.key, 'p1', 'ses_1');
    await s.idempotency.noteCreated(r.tenantId, r.scope, r.key, 'other', 'ses_x');
    await s.idempotency.noteCreated(r.tenantId, r.scope, r.key, 'p1', 'ses_2');
    await s.idempotency.release(r.tenantId, r.scope, r.key, 'other');
    await s.idempotency.complete(r.tenantId, r.scope, r.key, 'other', { status: 500, body: 'no' });
    expect(await s.idempotency.get(r.tenantId, r.scope, r.key)).toEqual({ ...r, created: ['ses_1', 'ses_2'] });
    await s.idempotency.complete(r.tenantId, r.scope, r.key, 'p1', { status: 201, body: '{"id":"ses_1"}' });
    const done = await s.idempotency.get(r.tenantId, r.scope, r.key);
    expect(done).toEqual({ ...r, created: ['ses_1', 'ses_2'], state: 'done', status: 201, body: '{"id":"ses_1"}' });
    // Done is final: no release, no second answer, no takeover.
    await s.idempotency.release(r.tenantId, r.scope, r.key, 'p1');
    await s.idempotency.complete(r.tenantId, r.scope, r.key, 'p1', { status: 500, body: '' });
    expect(await s.idempotency.takeOver(r.tenantId, r.scope, r.key, 'p1', 'p2')).toBe(false);
    expect(await s.idempotency.get(r.tenantId, r.scope, r.key)).toEqual(done);
  });

  it('takeOver hands a started row to one new owner; release frees the key', async () => {
    const s = store();
    const r = row();
    await s.idempotency.claim(r, 100);
    const takes = await Promise.all([s.idempotency.takeOver(r.tenantId, r.scope, r.key, 'p1', 'p2'), s.idempotency.takeOver(r.tenantId, r.scope, r.key, 'p1', 'p3')]);
    expect(takes.filter(Boolean)).toHaveLength(1);
    const owner = (await s.idempotency.get(r.tenantId, r.scope, r.key))?.owner as string;
    await s.idempotency.release(r.tenantId, r.scope, r.key, owner);
    expect(await s.idempotency.get(r.tenantId, r.scope, r.key)).toBeUndefined();
  });

  it('a claim inside a rolled-back transaction leaves nothing', async () => {
    const s = store();
    await expect(
      s.transaction(async (tx) => {
        await tx.idempotency.claim(row(), 100);
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await s.idempotency.get('ten_a', 'POST /v1/sessions', 'k1')).toBeUndefined();
  });

  it('ownerAlive: true for the owner this store holds, false for one nobody holds', async () => {
    const s = store();
    expect(await s.idempotency.ownerAlive('p1')).toBe(false);
    await s.idempotency.holdOwner('p1');
    expect(await s.idempotency.ownerAlive('p1')).toBe(true);
    expect(await s.idempotency.ownerAlive('p2')).toBe(false);
  });
}
