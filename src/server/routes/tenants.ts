import { Hono } from 'hono';
import { CreateTenantBodySchema, toTenantView, type CreatedTenantView, type TenantListView } from '../../protocol/index.js';
import { SetTenantQuotasBodySchema, toTenantUsageView, type TenantDetailView } from '../../protocol/index.js';
import type { TenantInfo } from '../../engine/api.js';
import { idParam, principal, readJson, type Env, type RouteDeps } from '../context.js';

function toDetail(t: TenantInfo): TenantDetailView {
  return { ...toTenantView(t.tenant), quotas: t.quotas, usage: toTenantUsageView(t.usage) };
}

export function tenantRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/tenants', async (c) => {
    const body = await readJson(c, CreateTenantBodySchema);
    const { tenant, apiKey } = await engine.createTenant(principal(c), body.name);
    return c.json<CreatedTenantView>({ ...toTenantView(tenant), apiKey }, 201);
  });

  r.get('/tenants', async (c) => c.json<TenantListView>({ tenants: (await engine.listTenants(principal(c))).map(toTenantView) }));

  // ---- quotas (issue 12 §3) ----
  r.get('/tenants/:id', async (c) => c.json<TenantDetailView>(toDetail(await engine.getTenant(principal(c), idParam(c, 'tenant')))));

  r.put('/tenants/:id/quotas', async (c) => {
    const id = idParam(c, 'tenant');
    const body = await readJson(c, SetTenantQuotasBodySchema);
    return c.json<TenantDetailView>(toDetail(await engine.setTenantQuotas(principal(c), id, body)));
  });

  return r;
}
