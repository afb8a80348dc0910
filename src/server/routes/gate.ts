/**
 * The tool gate's agent-facing routes: a session's tools, calls, and the status of one of its approvals.
 * Agent tokens may use these (for their own session only); everything else under /v1 is for operators.
 */
import { Hono } from 'hono';
import { CallBodySchema, CallsBodySchema, toApprovalView, type ApprovalView, type CallResultView, type ToolListView } from '../../protocol/index.js';
import { callOpts, idParam, jsonAnswer, principal, readJson, type Env, type RouteDeps } from '../context.js';

export function gateRoutes({ engine }: RouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.get('/sessions/:id/tools', async (c) => {
    const tools = await engine.gate.listTools(principal(c), idParam(c, 'session'));
    return c.json<ToolListView>({ tools });
  });

  r.post('/sessions/:id/tools/:name/call', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, CallBodySchema);
    const res = await engine.gate.callTool(principal(c), id, { tool: c.req.param('name'), args: body.args, ...(body.step !== undefined ? { step: body.step } : {}) }, callOpts(c));
    return c.json<CallResultView>(res);
  });

  r.post('/sessions/:id/calls', async (c) => {
    const id = idParam(c, 'session');
    const body = await readJson(c, CallsBodySchema);
    const res: CallResultView = await engine.gate.callTool(principal(c), id, { tool: body.tool, args: body.args, ...(body.step !== undefined ? { step: body.step } : {}) }, callOpts(c));
    return jsonAnswer(c, res);
  });

  r.get('/sessions/:id/approvals/:approvalId', async (c) => {
    const a = await engine.gate.getApproval(principal(c), idParam(c, 'session'), idParam(c, 'approval', 'approvalId'));
    return c.json<ApprovalView>(toApprovalView(a));
  });

  return r;
}
