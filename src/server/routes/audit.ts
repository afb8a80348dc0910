import { Hono } from 'hono';
import { AuditQuerySchema, toAuditEntryView, toAuditVerifyView, type AuditListView } from '../../protocol/index.js';
import { principal, readQuery, type Env, type RouteDeps } from '../context.js';

export function auditRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.get('/audit', async (c) => {
    const q = readQuery(c, AuditQuerySchema);
    return c.json<AuditListView>({ entries: (await engine.auditQuery(principal(c), q)).map(toAuditEntryView) });
  });

  r.get('/audit/verify', async (c) => c.json(toAuditVerifyView(await engine.auditVerify(principal(c)))));

  return r;
}
