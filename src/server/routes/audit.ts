import { Hono } from 'hono';
import { UnavailableError, parseSignedHead, type Principal } from '../../core/index.js';
import type { AuditProofs } from '../../engine/audit-proofs.js';
import {
  AuditConsistencyQuerySchema,
  AuditProveQuerySchema,
  AuditQuerySchema,
  AuditVerifyBodySchema,
  toAuditEntryView,
  toAuditVerifyView,
  type AuditKeyView,
  type AuditListView,
  type AuditVerifyView,
  type ConsistencyProofView,
  type InclusionProofView,
  type SignedHeadView,
} from '../../protocol/index.js';
import { principal, readJson, readQuery, type Env, type RouteDeps } from '../context.js';

export function auditRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();
  const proofs = (): AuditProofs => {
    if (engine.auditProofs === undefined) throw new UnavailableError('this server has no audit key');
    return engine.auditProofs;
  };
  const verify = async (p: Principal, raw: unknown[]): Promise<AuditVerifyView> => {
    const heads = raw.map((h, i) => parseSignedHead(h, `checkpoints[${i}]`));
    const chain = await engine.auditVerify(p);
    const tree = engine.auditProofs === undefined ? undefined : await engine.auditProofs.verify(p, heads);
    return toAuditVerifyView(chain, tree);
  };

  r.get('/audit', async (c) => {
    const q = readQuery(c, AuditQuerySchema);
    return c.json<AuditListView>({ entries: (await engine.auditQuery(principal(c), q)).map(toAuditEntryView) });
  });

  r.get('/audit/verify', async (c) => c.json<AuditVerifyView>(await verify(principal(c), [])));
  r.post('/audit/verify', async (c) => {
    const body = await readJson(c, AuditVerifyBodySchema);
    return c.json<AuditVerifyView>(await verify(principal(c), body.checkpoints ?? []));
  });

  r.get('/audit/key', (c) => c.json<AuditKeyView>(proofs().key(principal(c))));
  r.post('/audit/checkpoints', async (c) => c.json<SignedHeadView>(await proofs().checkpoint(principal(c))));
  r.get('/audit/proofs/inclusion/:seq', async (c) => {
    const q = readQuery(c, AuditProveQuerySchema);
    const seq = Number(c.req.param('seq'));
    return c.json<InclusionProofView>(await proofs().prove(principal(c), /^\d+$/.test(c.req.param('seq')) ? seq : -1, q));
  });
  r.get('/audit/proofs/consistency', async (c) => {
    const q = readQuery(c, AuditConsistencyQuerySchema);
    return c.json<ConsistencyProofView>(await proofs().consistency(principal(c), q.from, q.to));
  });

  return r;
}
