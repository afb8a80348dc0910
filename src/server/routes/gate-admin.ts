/** The tool gate's operator routes: policy, tool definitions, approvals, plans, gate settings, breaker. */
import { Hono } from 'hono';
import { InvalidArgumentError } from '../../core/index.js';
import type { GateInfo, PlanInfo, TenantPolicyInfo, ToolDefinitionInfo } from '../../engine/api.js';
import {
  ApprovalsQuerySchema,
  DenyBodySchema,
  EmptyBodySchema,
  GateSettingsBodySchema,
  InstallToolsBodySchema,
  PolicyBodySchema,
  TenantQuerySchema,
  isoOrNull,
  toApprovalView,
  type ApprovalListView,
  type ApprovalView,
  type GateView,
  type PlanView,
  type PolicyView,
  type ToolDefinitionListView,
  type ToolDefinitionView,
} from '../../protocol/index.js';
import { idParam, principal, readJson, readQuery, readText, type Ctx, type Env, type RouteDeps } from '../context.js';

/** A UTF-16 surrogate without its pair: not a Unicode character, so not policy text. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function toPolicyView(i: TenantPolicyInfo): PolicyView {
  return { ...i, updatedAt: isoOrNull(i.updatedAt), warnings: [...i.warnings] };
}

export function toToolDefinitionView(i: ToolDefinitionInfo): ToolDefinitionView {
  return { ...(i.definition as unknown as Omit<ToolDefinitionView, 'builtin' | 'updatedAt' | 'updatedBy'>), builtin: i.builtin, updatedAt: isoOrNull(i.updatedAt), updatedBy: i.updatedBy };
}

export function toGateView(g: GateInfo): GateView {
  return {
    sessionId: g.sessionId,
    tenantId: g.tenantId,
    tools: [...g.tools],
    egressAllow: [...g.settings.httpAllow],
    httpAllow: [...g.settings.httpAllow],
    egressAllowCidr: [...(g.settings.egressAllowCidr ?? [])],
    approvalTtlS: g.settings.approvalTtlS,
    breaker: {
      failures: g.settings.breaker.failures,
      perMinute: g.settings.breaker.perMinute,
      open: g.breaker.open,
      trip: g.breaker.trip,
      reason: g.breaker.reason,
      openedAt: isoOrNull(g.breaker.openedAt),
      streakFailures: g.breaker.streakFailures,
    },
    pausedByBreaker: g.pausedByBreaker,
    calls: g.calls,
  };
}

export function toPlanView(p: PlanInfo): PlanView {
  return { sessionId: p.sessionId, plan: p.plan as PlanView['plan'], state: p.state as PlanView['state'], setAt: isoOrNull(p.setAt), setBy: p.setBy };
}

/** A JSON body of any shape (plans and tool definitions are checked by the gate, which names the bad field). */
async function readAnyJson(c: Ctx): Promise<unknown> {
  const text = await readText(c);
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new InvalidArgumentError(`body: malformed JSON (${(e as Error).message})`, { details: { field: 'body' } });
  }
}

export function gateAdminRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  // A text/plain (or application/cedar) body is the policy itself; a JSON body is {policy}.
  r.put('/policy', async (c) => {
    const q = readQuery(c, TenantQuerySchema);
    const type = c.req.header('content-type') ?? '';
    const text = /^application\/json\b/i.test(type) ? (await readJson(c, PolicyBodySchema)).policy : await readText(c, (1 << 20) + 1);
    // JSON may carry a lone surrogate ("\ud800"), which no policy text can contain (Cedar fails inside).
    if (LONE_SURROGATE.test(text)) throw new InvalidArgumentError('policy: not well-formed Unicode (a lone surrogate)', { details: { field: 'policy' } });
    return c.json<PolicyView>(toPolicyView(await engine.gate.setPolicy(principal(c), text, q)));
  });

  r.get('/policy', async (c) => c.json<PolicyView>(toPolicyView(await engine.gate.getPolicy(principal(c), readQuery(c, TenantQuerySchema)))));

  r.post('/tools', async (c) => {
    const q = readQuery(c, TenantQuerySchema);
    const def = await readAnyJson(c);
    return c.json<ToolDefinitionView>(toToolDefinitionView(await engine.gate.defineTool(principal(c), def, q)), 201);
  });

  r.get('/tools', async (c) => {
    const list = await engine.gate.listToolDefinitions(principal(c), readQuery(c, TenantQuerySchema));
    return c.json<ToolDefinitionListView>({ tools: list.map(toToolDefinitionView) });
  });

  r.get('/approvals', async (c) => {
    const q = readQuery(c, ApprovalsQuerySchema);
    const list = await engine.gate.listApprovals(principal(c), { ...(q.state ? { statuses: q.state } : {}), ...(q.sessionId ? { sessionId: q.sessionId } : {}) });
    return c.json<ApprovalListView>({ approvals: list.map(toApprovalView) });
  });

  r.post('/approvals/:id/approve', async (c) => {
    const id = idParam(c, 'approval');
    await readJson(c, EmptyBodySchema);
    return c.json<ApprovalView>(toApprovalView(await engine.gate.approve(principal(c), id)));
  });

  r.get('/approvals/:id/screenshot', async (c) => {
    const png = await engine.gate.approvalScreenshot(principal(c), idParam(c, 'approval'));
    return c.body(new Uint8Array(png), 200, { 'content-type': 'image/png', 'cache-control': 'private, no-store' });
  });

  r.post('/approvals/:id/deny', async (c) => {
    const id = idParam(c, 'approval');
    const body = await readJson(c, DenyBodySchema);
    return c.json<ApprovalView>(toApprovalView(await engine.gate.deny(principal(c), id, body.reason)));
  });

  r.put('/sessions/:id/tools', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, InstallToolsBodySchema);
    return c.json<GateView>(toGateView(await engine.gate.installTools(principal(c), id, body.tools)));
  });

  r.get('/sessions/:id/gate', async (c) => c.json<GateView>(toGateView(await engine.gate.getGate(principal(c), idParam(c, 'session')))));

  r.put('/sessions/:id/gate', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, GateSettingsBodySchema);
    return c.json<GateView>(toGateView(await engine.gate.setGate(principal(c), id, body)));
  });

  r.post('/sessions/:id/breaker/reset', async (c) => {
    const id = idParam(c, 'session');
    await readJson(c, EmptyBodySchema);
    return c.json<GateView>(toGateView(await engine.gate.resetBreaker(principal(c), id)));
  });

  r.get('/sessions/:id/plan', async (c) => c.json<PlanView>(toPlanView(await engine.gate.getPlan(principal(c), idParam(c, 'session')))));

  r.put('/sessions/:id/plan', async (c) => {
    const id = idParam(c, 'session');
    const plan = await readAnyJson(c);
    return c.json<PlanView>(toPlanView(await engine.gate.setPlan(principal(c), id, plan)));
  });

  r.delete('/sessions/:id/plan', async (c) => c.json<PlanView>(toPlanView(await engine.gate.clearPlan(principal(c), idParam(c, 'session')))));

  return r;
}
