/**
 * `berth mcp --session ID`: the session's tools as an MCP server on stdio, for MCP clients that launch a
 * command (Claude Desktop, IDEs). Each tool call is proxied to the Berth server with BERTH_TOKEN (normally
 * the session's agent token), so the gate runs there, exactly as for HTTP callers.
 *
 * stdout carries MCP JSON-RPC and nothing else; diagnostics go to stderr. The server ends when the client
 * closes stdin (calls still running are let finish first) or on SIGINT/SIGTERM (they are cancelled).
 */
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Berth } from '../sdk/index.js';
import { createJsonLogger } from '../server/log.js';
import { mcpServerForTools, type SessionTools } from '../server/mcp.js';
import { parseCommand, type VerbContext } from './common.js';

export async function run(ctx: VerbContext): Promise<number> {
  const { values } = parseCommand('mcp', '', ctx.argv);
  const sessionId = values.session!;
  const log = createJsonLogger({ write: (line) => void ctx.io.stderr.write(line) });
  const tools = tracked(sdkTools(ctx.client(), sessionId));
  // Fail now, with a plain message, rather than at the client's first request (wrong token, no session).
  await tools.list({});

  const server = mcpServerForTools({ sessionId, tools, log });
  const transport = new StdioServerTransport(ctx.io.stdin, ctx.io.stdout);
  const closed = new Promise<void>((resolve) => (server.onclose = resolve));
  server.onerror = (e) => log.warn('mcp transport error', { message: e.message });
  await server.connect(transport);
  log.info('berth mcp serving', { sessionId, url: ctx.client().options.url });

  const stop = () => void server.close();
  const drain = () => void tools.idle().then(stop);
  ctx.io.stdin.once('end', drain);
  ctx.io.stdin.once('close', drain);
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    await closed;
  } finally {
    ctx.io.stdin.off('end', drain);
    ctx.io.stdin.off('close', drain);
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
  return 0;
}

/** The session's tools through the SDK: the gate runs on the server. */
export function sdkTools(client: Berth, sessionId: string): SessionTools {
  return {
    list: (opts) => client.tools.list(sessionId, opts),
    call: (c, opts) => client.tools.call(sessionId, c.tool, c.args, { ...opts, ...(c.step !== undefined ? { step: c.step } : {}) }),
    approvals: (approvalId, opts) => client.approvals.get(sessionId, approvalId, opts),
  };
}

/** Counts calls in flight so a closed stdin can let them answer before the server stops. */
function tracked(t: SessionTools): SessionTools & { idle(): Promise<void> } {
  const inFlight = new Set<Promise<unknown>>();
  const track = <T>(p: Promise<T>): Promise<T> => {
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p)).catch(() => undefined);
    return p;
  };
  return {
    list: (opts) => track(t.list(opts)),
    call: (c, opts) => track(t.call(c, opts)),
    approvals: t.approvals && ((id, opts) => track(t.approvals!(id, opts))),
    idle: async () => {
      while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
      // The MCP layer sends each answer a few promise hops after the call settles: let it.
      await new Promise((r) => setImmediate(r));
    },
  };
}
