/**
 * The MCP adapter through the official SDK client: over an in-memory pair against a scripted ToolGateApi
 * (the adapter's mapping of every outcome is the subject), and over streamable HTTP through the Hono route
 * in-process against the real engine and gate over the in-memory driver. Real runsc is in test/mcp/.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Hono } from 'hono';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AppError, type ApprovalRecord, type Principal } from '../core/index.js';
import type { CallResult, ToolCall, ToolGateApi, ToolView } from '../engine/api.js';
import type { Env } from './context.js';
import { APPROVAL_STATUS_TOOL, META_DECISION, META_STEP, mcpServerFor, renderCallResult } from './mcp.js';
import { mcpRoutes } from './mcp-http.js';
import { toApprovalView } from '../protocol/index.js';
import { bearerAuth, errorHandler, notFound } from './middleware.js';
import { silentLogger } from './log.js';
import { createTestEngine, type TestEngine } from '../../test/helpers/engine.js';

const TOOLS: ToolView[] = [
  {
    name: 'fs.read',
    description: 'reads',
    inputSchema: { type: 'object', required: ['path'], properties: { path: { type: 'string' } } },
    outputSchema: { type: 'object', required: ['content'], properties: { content: { type: 'string' } } },
    risk: 'read',
  },
  {
    name: 'report.publish',
    description: 'publishes',
    inputSchema: { type: 'object', properties: { title: { type: 'string' } } },
    outputSchema: { type: 'string' },
    risk: 'irreversible',
  },
];

class ScriptedGate implements ToolGateApi {
  calls: Array<{ p: Principal; sessionId: string; call: ToolCall }> = [];
  next: CallResult | Error = { decision: 'allow', result: { content: 'hello' } };
  async listTools(): Promise<ToolView[]> {
    return TOOLS;
  }
  async callTool(p: Principal, sessionId: string, call: ToolCall): Promise<CallResult> {
    this.calls.push({ p, sessionId, call });
    if (this.next instanceof Error) throw this.next;
    return this.next;
  }
  getApproval(_p: Principal, sessionId: string, approvalId: string): ApprovalRecord {
    if (approvalId !== 'apr_1') throw new AppError('not_found', `approval ${approvalId} not found`);
    return {
      id: approvalId,
      tenantId: 't',
      sessionId,
      tool: 'report.publish',
      args: {},
      argsDigest: 'd',
      step: null,
      status: 'used',
      policyIds: ['approve-irreversible-tools'],
      requestedBy: `agent:${sessionId}`,
      createdAt: 0,
      expiresAt: null,
      decidedBy: 'root',
      decidedAt: 1000,
      reason: null,
      usedAt: 1000,
      result: { decision: 'allow', result: 'published', approvalId },
      deliveredAt: null,
    };
  }
}

const text = (r: Awaited<ReturnType<Client['callTool']>>) => (r.content as Array<{ type: string; text: string }>)[0]?.text;

describe('mcpServerFor (in memory)', () => {
  let gate: ScriptedGate;
  let client: Client;
  const p: Principal = { kind: 'agent', id: 'ses_x', tenantId: 't' };

  beforeEach(async () => {
    gate = new ScriptedGate();
    const server = mcpServerFor({ gate, principal: p, sessionId: 'ses_x', approvals: async (id) => toApprovalView(gate.getApproval(p, 'ses_x', id)) });
    const [a, b] = InMemoryTransport.createLinkedPair();
    await server.connect(a);
    client = new Client({ name: 'test', version: '0' });
    await client.connect(b);
  });
  afterEach(() => client.close());

  it('lists the gate tools with dotted names, risk annotations, and the approval helper', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['fs.read', 'report.publish', APPROVAL_STATUS_TOOL]);
    const [read, publish] = tools;
    expect(read?.annotations).toMatchObject({ readOnlyHint: true, destructiveHint: false });
    expect(read?.outputSchema).toBeDefined();
    expect(publish?.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(publish?.outputSchema).toBeUndefined(); // not an object schema
    expect(publish?._meta).toEqual({ 'berth/risk': 'irreversible' });
  });

  it('passes a call to the gate and returns the result as text and structured content', async () => {
    await client.listTools();
    const r = await client.callTool({ name: 'fs.read', arguments: { path: '/a' }, _meta: { [META_STEP]: 'read' } });
    expect(r.isError).toBeFalsy();
    expect(JSON.parse(text(r) ?? '')).toEqual({ content: 'hello' });
    expect(r.structuredContent).toEqual({ content: 'hello' });
    expect(gate.calls).toEqual([{ p, sessionId: 'ses_x', call: { tool: 'fs.read', args: { path: '/a' }, step: 'read' } }]);
  });

  it('turns a deny into a tool error naming stage and code', async () => {
    gate.next = { decision: 'deny', stage: 'plan', code: 'off_plan', reason: 'not the next step' };
    const r = await client.callTool({ name: 'fs.read', arguments: { path: '/etc/cron.d/x' } });
    expect(r.isError).toBe(true);
    expect(text(r)).toBe('denied at stage plan (off_plan): not the next step');
    expect(r._meta?.[META_DECISION]).toEqual(gate.next);
  });

  it('turns a pending call into a tool error with the approval id, and answers the approval helper', async () => {
    gate.next = { decision: 'pending', approvalId: 'apr_1' };
    const r = await client.callTool({ name: 'report.publish', arguments: {} });
    expect(r.isError).toBe(true);
    expect(text(r)).toContain('apr_1');
    const s = await client.callTool({ name: APPROVAL_STATUS_TOOL, arguments: { approvalId: 'apr_1' } });
    expect(s.structuredContent).toMatchObject({ approvalId: 'apr_1', status: 'used', usedAt: '1970-01-01T00:00:01.000Z', result: { decision: 'allow', result: 'published' } });
    const missing = await client.callTool({ name: APPROVAL_STATUS_TOOL, arguments: { approvalId: 'apr_2' } });
    expect(missing.isError).toBe(true);
    expect(text(missing)).toMatch(/^error \(not_found\)/);
    expect(gate.calls).toHaveLength(1);
  });

  it('reports an AppError as a tool error with its code, and hides anything else', async () => {
    gate.next = new AppError('sandbox_failed', 'the sandbox died');
    expect(text(await client.callTool({ name: 'fs.read', arguments: {} }))).toBe('error (sandbox_failed): the sandbox died');
    gate.next = new Error('secret internals');
    const r = await client.callTool({ name: 'fs.read', arguments: {} });
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/^error \(internal\)/);
    expect(text(r)).not.toContain('secret');
  });
});

describe('mcpRoutes (streamable HTTP, in process, over the real engine and gate)', () => {
  let t: TestEngine;
  let app: Hono<Env>;

  beforeEach(async () => {
    t = await createTestEngine();
    app = new Hono<Env>();
    app.use('/v1/*', bearerAuth(t.engine));
    app.route('/v1', mcpRoutes({ engine: t.engine, log: silentLogger }));
    app.notFound(notFound());
    app.onError(errorHandler(silentLogger));
  });
  afterEach(async () => {
    await t.close();
  });

  function connect(sessionId: string, token: string): Promise<Client> {
    const transport = new StreamableHTTPClientTransport(new URL(`http://berth.test/v1/sessions/${sessionId}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
      fetch: async (url, init) => app.fetch(new Request(url, init)),
    });
    const client = new Client({ name: 'test', version: '0' });
    return client.connect(transport).then(() => client);
  }

  it('serves the session to its agent token, stateless, with the principal bound per request', async () => {
    const { session, agentToken } = await t.engine.createSession(t.root, {});
    await t.engine.writeFile(t.root, session.id, '/work/a', (async function* () {
      yield new TextEncoder().encode('hello');
    })());
    const client = await connect(session.id, agentToken);
    const { tools } = await client.listTools();
    expect(tools.map((x) => x.name)).toEqual(expect.arrayContaining(['fs.read', 'fs.write', 'shell.exec']));
    expect(tools.at(-1)?.name).toBe(APPROVAL_STATUS_TOOL);
    const r = await client.callTool({ name: 'fs.read', arguments: { path: '/work/a' } });
    expect(r.isError).toBeFalsy();
    expect(r.structuredContent).toMatchObject({ path: '/work/a', content: 'hello', size: 5, truncated: false });
    // The gate decided and recorded the call, in the agent's name.
    const result = (await t.engine.auditQuery(t.root, { sessionId: session.id })).find((e) => e.action === 'tool.result');
    expect(result?.principal).toMatchObject({ kind: 'agent', id: session.id });
    await client.close();
  });

  it('turns a policy deny into a tool error naming stage and code', async () => {
    const { session, agentToken } = await t.engine.createSession(t.root, {});
    const client = await connect(session.id, agentToken);
    const r = await client.callTool({ name: 'fs.write', arguments: { path: '/proc/x', content: 'x' } });
    expect(r.isError).toBe(true);
    expect(r._meta?.[META_DECISION]).toMatchObject({ decision: 'deny', stage: 'policy' });
    await client.close();
  });

  it('refuses a missing token, an unknown session and another session\'s agent over plain HTTP', async () => {
    const res = await app.request('/v1/sessions/ses_x/mcp', { method: 'POST', body: '{}' });
    expect(res.status).toBe(401);
    await expect(connect('ses_00000000000000000000', t.rootKey)).rejects.toThrow();
    const r = await app.request('/v1/sessions/ses_00000000000000000000/mcp', {
      method: 'POST',
      headers: { authorization: `Bearer ${t.rootKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(r.status).toBe(404);
    expect((await r.json()).error.code).toBe('not_found');
    const a = await t.engine.createSession(t.root, {});
    const b = await t.engine.createSession(t.root, {});
    const other = await app.request(`/v1/sessions/${b.session.id}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${a.agentToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(other.status).toBe(404);
  });

  it('answers GET and DELETE with 405', async () => {
    for (const method of ['GET', 'DELETE']) {
      const res = await app.request('/v1/sessions/ses_x/mcp', { method, headers: { authorization: `Bearer ${t.rootKey}` } });
      expect(res.status).toBe(405);
    }
  });
});

describe('renderCallResult: images (the computer tool)', () => {
  it('returns each image field as MCP image content, and the text without its data', () => {
    const shot = { mimeType: 'image/png', data: 'iVBORw0KGgo=', width: 1, height: 1, sha256: 'a'.repeat(64) };
    const r = renderCallResult('computer', { decision: 'allow', result: { action: 'screenshot', screen: { width: 1, height: 1 }, screenshot: shot } }, false);
    expect(r.content).toEqual([
      { type: 'text', text: JSON.stringify({ action: 'screenshot', screen: { width: 1, height: 1 }, screenshot: { ...shot, data: '(image content below)' } }) },
      { type: 'image', data: shot.data, mimeType: 'image/png' },
    ]);
    expect(r.structuredContent).toMatchObject({ screenshot: shot });
  });

  it('leaves results without images as one text part', () => {
    const r = renderCallResult('fs.read', { decision: 'allow', result: { path: '/a', size: 1, truncated: false, content: 'x' } }, false);
    expect(r.content).toHaveLength(1);
  });
});
