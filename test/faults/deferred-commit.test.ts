/**
 * A 'deferred' commit (core/store.ts TransactionOptions: the gate's result, Idempotency-Key claims) is not
 * fsynced before it returns. What it must still guarantee, shown by killing the process right after one:
 * the commit survives the death of the process, and the head anchor beside the database is never ahead of
 * what the database holds (it can only lag, which verification accepts and the next open catches up).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readAnchor, verifyAudit } from '../../src/store/audit.js';
import { openSqliteStore } from '../../src/store/sqlite.js';

const root = resolve(import.meta.dirname, '../..');
const dist = join(root, 'dist/src/store/sqlite.js');
const dir = mkdtempSync(join(tmpdir(), 'berth-deferred-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CHILD = `
import { openSqliteStore } from ${JSON.stringify(dist)};
const store = openSqliteStore({ path: process.argv[2] });
const entry = (n) => ({ tenantId: 'ten_a', sessionId: 'ses_1', principal: { kind: 'operator', id: 'ten_a', tenantId: 'ten_a' }, action: 'tool.result', outcome: 'ok', data: { n } });
await store.audit.append(entry(1));
for (let n = 2; n <= 40; n++) await store.transaction(() => store.audit.append(entry(n)), { durability: 'deferred' });
process.stdout.write('committed\\n');
process.kill(process.pid, 'SIGKILL'); // before the background fsync of the last commits has answered
`;

describe('a deferred commit, then SIGKILL', () => {
  it('keeps every committed entry; the anchor, which may lag, is caught up on the next open', async () => {
    if (!existsSync(dist)) throw new Error(`${dist} is missing: npm test builds it (node scripts/setup.mjs)`);
    const script = join(dir, 'child.mjs');
    writeFileSync(script, CHILD);
    for (let round = 0; round < 5; round++) {
      const db = join(dir, `r${round}.db`);
      const r = spawnSync(process.execPath, [script, db], { encoding: 'utf8', timeout: 60_000 });
      expect(r.signal, r.stderr).toBe('SIGKILL');
      expect(r.stdout).toBe('committed\n');
      const anchor = readAnchor(`${db}.audit-head`);
      expect(anchor.status).toBe('ok');
      // Written at open (seq 0), then in the background after durable commits: it may lag any of the 40,
      // and the reopen below shows it never names an entry the database does not hold.
      if (anchor.status === 'ok') expect(anchor.anchor.seq).toBeLessThanOrEqual(40);
      const s = openSqliteStore({ path: db });
      try {
        expect((await s.audit.query()).map((e) => e.data.n)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
        expect(await verifyAudit(s)).toMatchObject({ ok: true, entries: 40, anchor: 'matched' }); // caught up on open
      } finally {
        await s.close();
      }
    }
  });
});
