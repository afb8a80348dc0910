/**
 * MCP end to end, with the official SDK client against a real server and real gVisor sessions:
 * (a) the per-session streamable-HTTP endpoint with the agent token; (b) `berth mcp --session ID` on stdio,
 * proxying to the server. Every call passes the real gate: policy refusals and off-plan calls come back as
 * tool errors naming the stage.
 */
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Session } from '../../src/sdk/index.js';
import { REPO, gvisorMissing, skipReason } from '../helpers/env.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const skip = skipReason('MCP e2e', gvisorMissing());

const text = (r: CallToolResult) => r.content.map((c) => (c.type === 'text' ? c.text : '')).join('');

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  return (await client.callTool({ name, arguments: args })) as CallToolResult;
}

function httpClient(url: string, sessionId: string, token: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/v1/sessions/${sessionId}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'berth-test', version: '0' });
  return client.connect(transport).then(() => client);
}

describe.skipIf(skip)('MCP over the real gate', () => {
  let srv: TestServer;
  let session: Session;

  beforeAll(async () => {
    srv = await startTestServer();
    session = await srv.client.sessions.create({ objective: 'mcp test' });
  }, 300_000);
  afterAll(async () => {
    await srv?.destroy();
  });

  describe('(a) streamable HTTP with the agent token', () => {
    let client: Client;
    beforeAll(async () => {
      client = await httpClient(srv.url, session.id, session.agentToken!);
    });
    afterAll(() => client?.close());

    it('lists the session tools under their dotted names', async () => {
      const { tools } = await client.listTools();
      const names = tools.map((t) => t.name);
      expect(names).toEqual(expect.arrayContaining(['shell.exec', 'fs.read', 'fs.write', 'fs.list', 'http.request', 'berth.approval_status']));
      const read = tools.find((t) => t.name === 'fs.read');
      expect(read?.inputSchema).toMatchObject({ type: 'object', required: ['path'] });
      expect(read?.annotations?.readOnlyHint).toBe(true);
    });

    it('runs allowed calls in the sandbox: fs.write, fs.read, shell.exec', async () => {
      const w = await call(client, 'fs.write', { path: '/root/mcp.txt', content: 'hello over mcp' });
      expect(w.isError, text(w)).toBeFalsy();
      expect(w.structuredContent).toMatchObject({ path: '/root/mcp.txt', bytesWritten: 14 });
      const r = await call(client, 'fs.read', { path: '/root/mcp.txt' });
      expect(r.isError, text(r)).toBeFalsy();
      expect(r.structuredContent).toMatchObject({ content: 'hello over mcp', truncated: false });
      expect(JSON.parse(text(r)).content).toBe('hello over mcp');
      const x = await call(client, 'shell.exec', { command: 'cat /root/mcp.txt | wc -c' });
      expect(x.structuredContent).toMatchObject({ exitCode: 0, stdout: '14\n' });
    });

    it('returns a policy refusal as a tool error naming the stage', async () => {
      const r = await call(client, 'shell.exec', { command: 'mkfs.ext4 /dev/vda' });
      expect(r.isError).toBe(true);
      expect(text(r)).toMatch(/^denied at stage policy \(policy_denied\): /);
      expect(r._meta?.['berth/decision']).toMatchObject({ decision: 'deny', stage: 'policy', code: 'policy_denied' });
    });

    it('returns bad arguments as a tool error the model can fix', async () => {
      const r = await call(client, 'fs.read', { file: '/root/mcp.txt' });
      expect(r.isError).toBe(true);
      expect(text(r)).toMatch(/^denied at stage arguments \(invalid_arguments\)/);
    });

    it('refuses an off-plan call once a plan is set, and lets the planned one through', async () => {
      await srv.client.plans.set(session.id, {
        objective: 'read the note',
        steps: [{ id: 'read-note', tool: 'fs.read', arguments: { type: 'object', properties: { path: { const: '/root/mcp.txt' } } } }],
      });
      const off = await call(client, 'fs.write', { path: '/root/other.txt', content: 'x' });
      expect(off.isError).toBe(true);
      expect(text(off)).toMatch(/^denied at stage plan \(off_plan\): /);
      const on = await call(client, 'fs.read', { path: '/root/mcp.txt' });
      expect(on.isError, text(on)).toBeFalsy();
      await srv.client.plans.clear(session.id);
    });

    it("will not serve one session's tools to another session's agent token", async () => {
      const other = await srv.client.sessions.create({ objective: 'other' });
      try {
        await expect(httpClient(srv.url, session.id, other.agentToken!)).rejects.toThrow();
        const res = await fetch(`${srv.url}/v1/sessions/${session.id}/mcp`, {
          method: 'POST',
          headers: { authorization: `Bearer ${other.agentToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
        });
        expect(res.status).toBe(404);
      } finally {
        await other.terminate();
      }
    });
  });

  describe('(b) stdio: berth mcp --session ID', () => {
    let client: Client;
    let transport: StdioClientTransport;
    let stderr = '';

    beforeAll(async () => {
      transport = new StdioClientTransport({
        command: process.execPath,
        args: [join(REPO, 'bin', 'berth'), 'mcp', '--session', session.id],
        env: { BERTH_URL: srv.url, BERTH_TOKEN: session.agentToken! },
        stderr: 'pipe',
      });
      transport.stderr?.on('data', (b: Buffer) => (stderr += b.toString()));
      client = new Client({ name: 'berth-test-stdio', version: '0' });
      await client.connect(transport);
    }, 60_000);
    afterAll(() => client?.close());

    it('lists and calls the tools through the server gate', async () => {
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['fs.read', 'shell.exec', 'berth.approval_status']));
      const r = await call(client, 'fs.read', { path: '/root/mcp.txt' });
      expect(r.isError, `${text(r)}\n${stderr}`).toBeFalsy();
      expect(r.structuredContent).toMatchObject({ content: 'hello over mcp' });
      const d = await call(client, 'shell.exec', { command: 'mkfs.ext4 /dev/vda' });
      expect(text(d)).toMatch(/^denied at stage policy \(policy_denied\)/);
    });

    it('the calls are in the audit log under the agent principal', async () => {
      const entries = await srv.client.audit.query({ sessionId: session.id, limit: 1000 });
      const byAgent = entries.filter((e) => e.principal.kind === 'agent' && e.principal.id === session.id);
      expect(byAgent.length).toBeGreaterThan(0);
      expect((await srv.client.audit.verify()).ok).toBe(true);
    });

    it('exits when the client closes stdin', async () => {
      // The SDK's close() ends stdin, waits up to 2 s, then sends SIGTERM: a quick close means stdin did it.
      const t0 = performance.now();
      await client.close();
      expect(performance.now() - t0).toBeLessThan(1500);
    });
  });
});
