import { Hono } from 'hono';
import { CreateTenantBodySchema, toTenantView, type CreatedTenantView, type TenantListView } from '../../protocol/index.js';
import { principal, readJson, type Env, type RouteDeps } from '../context.js';

export function tenantRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/tenants', async (c) => {
    const body = await readJson(c, CreateTenantBodySchema);
    const { tenant, apiKey } = await engine.createTenant(principal(c), body.name);
    return c.json<CreatedTenantView>({ ...toTenantView(tenant), apiKey }, 201);
  });

  r.get('/tenants', async (c) => c.json<TenantListView>({ tenants: (await engine.listTenants(principal(c))).map(toTenantView) }));

  return r;
}
