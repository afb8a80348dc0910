/**
 * `/v1/sessions/:id/mcp`: the session's tools over MCP streamable HTTP, behind the same bearer auth as the
 * rest of /v1 (the session's agent token, or an operator's key).
 *
 * Stateless: every POST gets a fresh server and transport (sessionIdGenerator undefined), bound to the
 * request's principal, so nothing of an MCP session outlives its request and a token's rights are checked
 * on each one. The SDK's web-standard transport takes the Fetch Request Hono already has and answers with a
 * Response, so no Node req/res bridging is needed. A stateless server has no stream to offer on GET and no
 * session to end on DELETE; both answer 405, which the transport spec provides for and the SDK's client
 * expects.
 */
import { Hono } from 'hono';
import type { Principal } from '../core/index.js';
import type { Engine, GateService } from '../engine/api.js';
import { LIMITS, toApprovalView } from '../protocol/index.js';
import { idParam, principal, type Env } from './context.js';
import type { Logger } from './log.js';
import type { ApprovalLookup } from './mcp.js';

/**
 * The MCP SDK (and the schema compiler it loads) on the first MCP request, not at startup: importing it
 * is about a third of the server's module loading, which every restart waits for before re-adopting.
 */
let sdk: Promise<[typeof import('@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'), typeof import('./mcp.js')]> | undefined;
const loadSdk = () => (sdk ??= Promise.all([import('@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'), import('./mcp.js')]));

export interface McpRouteDeps {
  /** Its `gate` serves the tools. */
  engine: Pick<Engine, 'gate'>;
  log: Logger;
}

export function mcpRoutes(deps: McpRouteDeps): Hono<Env> {
  const r = new Hono<Env>();

  r.post('/sessions/:id/mcp', async (c) => {
    const sessionId = idParam(c, 'session');
    const p = principal(c);
    const gate = deps.engine.gate;
    // A session the caller may not see is a plain HTTP 404 before any MCP traffic. (listTools, not
    // getSession: agent tokens may list their session's tools but not read its record.)
    await gate.listTools(p, sessionId);
    const [{ WebStandardStreamableHTTPServerTransport }, { mcpServerFor }] = await loadSdk();
    const server = mcpServerFor({ gate, principal: p, sessionId, approvals: approvalLookup(gate, p, sessionId), log: deps.log });
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, maxRequestBodySize: LIMITS.jsonBodyBytes });
    await server.connect(transport);
    const close = () => void server.close().catch(() => undefined);
    // Closing the server aborts its in-flight handlers (their signal reaches the engine): done when the
    // client goes away, or once the answer has been sent.
    c.req.raw.signal.addEventListener('abort', close, { once: true });
    const res = await transport.handleRequest(c.req.raw);
    if (!res.body) {
      close();
      return res;
    }
    const body = res.body.pipeThrough(new TransformStream<Uint8Array, Uint8Array>({ flush: close }));
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  });

  const notAllowed = (method: string) =>
    Response.json(
      { jsonrpc: '2.0', error: { code: -32000, message: `${method} is not supported: this MCP endpoint is stateless; POST JSON-RPC messages` }, id: null },
      { status: 405, headers: { allow: 'POST' } },
    );
  r.get('/sessions/:id/mcp', () => notAllowed('GET'));
  r.delete('/sessions/:id/mcp', () => notAllowed('DELETE'));

  return r;
}

/** berth.approval_status through the gate: the approval as the HTTP API shows it (status, and the result once run). */
function approvalLookup(gate: GateService, p: Principal, sessionId: string): ApprovalLookup {
  return async (approvalId) => toApprovalView(await gate.getApproval(p, sessionId, approvalId));
}
