/**
 * The MCP adapter: one session's gated tools as an MCP server. tools/list comes from the gate's tool list,
 * tools/call goes through the gate; nothing here decides anything. The same server runs behind the
 * streamable-HTTP route (mcp-http.ts, bound to the engine) and behind `berth mcp` on stdio (bound to the
 * SDK, so the gate runs on the Berth server).
 *
 * Tool names pass through unchanged. Berth names are dotted lower-case segments (`shell.exec`, at most 64
 * characters, see policy/tools.ts), a subset of what MCP allows (SEP-986: `[A-Za-z0-9._-]{1,128}`), so no
 * mapping is needed and the name a client calls is the name the gate and the audit log see. Clients whose
 * model API forbids dots (OpenAI function names) map the names themselves.
 *
 * Results, as the model sees them:
 *   allow    content: the result as JSON text; structuredContent: the result (when it is a JSON object);
 *            each top-level image field ({mimeType: "image/…", data: base64}, the computer tool's screenshot)
 *            comes as MCP image content after the text, and the text shows it without its data
 *   deny     isError; text `denied at stage <stage> (<code>): <reason>`
 *   pending  isError; text naming the approval id and how to follow it up (APPROVAL_STATUS_TOOL)
 *   error    isError; text `error (<code>): <message>` for an AppError (e.g. the sandbox failed);
 *            anything else is logged and reported as `error (internal)`.
 * The machine-readable outcome rides along in `_meta["berth/decision"]` (a CallResult) for clients that
 * want it without parsing text. A plan step id may be claimed with `_meta["berth/step"]` on tools/call.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { isAppError, type CallOptions, type Principal } from '../core/index.js';
import type { CallResult, ToolCall, ToolGateApi, ToolView } from '../engine/api.js';
import { silentLogger, type Logger } from './log.js';

/** Reported to MCP clients at initialize. */
export const MCP_SERVER_INFO = Object.freeze({ name: 'berth', version: '0.1.0' });

/** The helper tool offered when approvals can be looked up: `{approvalId}` → the approval's status. */
export const APPROVAL_STATUS_TOOL = 'berth.approval_status';

/** `_meta` keys: the outcome on results, the claimed plan step on calls. */
export const META_DECISION = 'berth/decision';
export const META_STEP = 'berth/step';

/** Looks up one approval of the bound session, as the agent may see it (status, and the result once run). */
export type ApprovalLookup = (approvalId: string, opts: CallOptions) => Promise<unknown>;

/** One session's tools, bound to whoever calls them. */
export interface SessionTools {
  list(opts: CallOptions): Promise<ToolView[]>;
  call(call: ToolCall, opts: CallOptions): Promise<CallResult>;
  /** Approval lookups for APPROVAL_STATUS_TOOL; null = the helper tool is not offered. */
  approvals: ApprovalLookup | null;
}

export interface McpServerForOptions {
  gate: ToolGateApi;
  principal: Principal;
  sessionId: string;
  /** Offers APPROVAL_STATUS_TOOL when given. Default: not offered. */
  approvals?: ApprovalLookup | null;
  /** Where unexpected (non-AppError) failures are logged. Default silent. */
  log?: Logger;
}

/** An MCP server over the engine's gate for one session and principal. Connect it to one transport. */
export function mcpServerFor(o: McpServerForOptions): Server {
  const { gate, principal, sessionId } = o;
  return mcpServerForTools({
    sessionId,
    tools: {
      list: () => gate.listTools(principal, sessionId),
      call: (call, opts) => gate.callTool(principal, sessionId, call, opts),
      approvals: o.approvals ?? null,
    },
    log: o.log,
  });
}

export interface McpServerForToolsOptions {
  /** Only for the instructions text. */
  sessionId: string;
  tools: SessionTools;
  /** Default silent. */
  log?: Logger;
}

/** An MCP server over any binding of a session's tools (the engine's gate, or the SDK in `berth mcp`). */
export function mcpServerForTools(o: McpServerForToolsOptions): Server {
  const { tools, sessionId } = o;
  const log = o.log ?? silentLogger;
  // The low-level Server, not McpServer: the tool set is the session's (it changes when the operator
  // registers tools, so it is read at every tools/list) and its schemas are JSON Schema, not zod.
  const server = new Server(MCP_SERVER_INFO, { capabilities: { tools: {} }, instructions: instructions(sessionId, tools.approvals !== null) });

  server.setRequestHandler(ListToolsRequestSchema, async (_req, extra) => {
    const views = await tools.list({ signal: extra.signal });
    const out = views.map(toMcpTool);
    if (tools.approvals && !views.some((t) => t.name === APPROVAL_STATUS_TOOL)) out.push(APPROVAL_STATUS_DEFINITION);
    return { tools: out };
  });

  server.setRequestHandler(CallToolRequestSchema, async (req, extra): Promise<CallToolResult> => {
    const { name, arguments: args, _meta } = req.params;
    const opts = { signal: extra.signal };
    try {
      if (name === APPROVAL_STATUS_TOOL && tools.approvals) {
        const owned = (await tools.list(opts)).some((t) => t.name === APPROVAL_STATUS_TOOL);
        if (!owned) return await approvalStatus(tools.approvals, args, opts);
      }
      const step = _meta?.[META_STEP];
      const call: ToolCall = { tool: name, args: args ?? {}, ...(typeof step === 'string' ? { step } : {}) };
      return renderCallResult(name, await tools.call(call, opts), tools.approvals !== null);
    } catch (e) {
      if (extra.signal.aborted) throw e; // the request was cancelled: nobody reads an answer
      return renderError(e, log, name);
    }
  });

  return server;
}

function instructions(sessionId: string, approvalTool: boolean): string {
  return [
    `The tools of Berth session ${sessionId}; they run inside the session's isolated sandbox.`,
    "Every call first passes Berth's gate (argument schema, policy, plan, approval, breaker).",
    'A refused call returns a tool error "denied at stage <stage> (<code>): <reason>"; the reason says what to do instead.',
    'A call that needs an operator returns a tool error naming its approval id; it has not run.',
    approvalTool ? `Check on it with ${APPROVAL_STATUS_TOOL}.` : 'Ask the operator, then call again.',
  ].join(' ');
}

/** A ToolView as an MCP tool. Risk becomes the standard annotations (hints only) and `_meta["berth/risk"]`. */
export function toMcpTool(t: ToolView): Tool {
  const tool: Tool = {
    name: t.name,
    description: t.description,
    inputSchema: t.inputSchema as Tool['inputSchema'],
    annotations: {
      readOnlyHint: t.risk === 'read',
      // 'write' tools change the session's own throwaway sandbox only; 'irreversible' ones reach past it.
      destructiveHint: t.risk === 'irreversible',
    },
    _meta: { 'berth/risk': t.risk },
  };
  // MCP requires an object output schema; a tool whose results are not objects simply has none there.
  if (t.outputSchema.type === 'object') tool.outputSchema = t.outputSchema as Tool['outputSchema'];
  return tool;
}

const APPROVAL_STATUS_DEFINITION: Tool = {
  name: APPROVAL_STATUS_TOOL,
  description:
    'Reports an approval of this session that an earlier call was waiting on: pending, approved or denied ' +
    '(and whether the call has run). Takes the approval id from the pending message.',
  inputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['approvalId'],
    properties: { approvalId: { type: 'string', minLength: 1, maxLength: 128 } },
  },
  annotations: { readOnlyHint: true, destructiveHint: false },
  _meta: { 'berth/risk': 'read' },
};

async function approvalStatus(lookup: ApprovalLookup, args: Record<string, unknown> | undefined, opts: CallOptions): Promise<CallToolResult> {
  const id = args?.approvalId;
  if (typeof id !== 'string' || id === '' || Object.keys(args ?? {}).length !== 1) {
    return toolError(`the arguments for ${APPROVAL_STATUS_TOOL} are invalid: expected {"approvalId": "<id from the pending message>"}`);
  }
  const status = await lookup(id, opts);
  return { content: [{ type: 'text', text: JSON.stringify(status) }], ...(isPlainObject(status) ? { structuredContent: status } : {}) };
}

/** The CallToolResult for one gate outcome. */
export function renderCallResult(tool: string, r: CallResult, approvalTool: boolean): CallToolResult {
  const _meta = { [META_DECISION]: r };
  switch (r.decision) {
    case 'allow': {
      const images = imageFields(r.result);
      const text = images.length ? { ...(r.result as Record<string, unknown>) } : r.result;
      for (const [k, img] of images) (text as Record<string, unknown>)[k] = { ...img, data: '(image content below)' };
      return {
        content: [{ type: 'text', text: JSON.stringify(text ?? null) }, ...images.map(([, img]) => ({ type: 'image' as const, data: img.data, mimeType: img.mimeType }))],
        ...(isPlainObject(r.result) ? { structuredContent: r.result } : {}),
        _meta,
      };
    }
    case 'deny':
      return { ...toolError(denyText(r)), _meta };
    case 'pending':
      return { ...toolError(pendingText(tool, r.approvalId, approvalTool)), _meta };
  }
}

export function denyText(r: Extract<CallResult, { decision: 'deny' }>): string {
  return `denied at stage ${r.stage} (${r.code}): ${r.reason}`;
}

/** The engine runs an approved call once, at approval; the same call made again then answers its result. */
export function pendingText(tool: string, approvalId: string, approvalTool: boolean): string {
  const check = approvalTool ? `Check on it with ${APPROVAL_STATUS_TOOL} {"approvalId":"${approvalId}"}. ` : '';
  return (
    `pending approval ${approvalId}: ${tool} needs an operator's approval and has not run. ` +
    `It runs once, as soon as an operator approves it. ${check}` +
    `To receive its result, call ${tool} again with exactly the same arguments after it is approved; until then, go on with other work.`
  );
}

function renderError(e: unknown, log: Logger, tool: string): CallToolResult {
  if (isAppError(e)) return toolError(`error (${e.code}): ${e.message}`);
  log.error('mcp tool call failed', { tool, message: e instanceof Error ? e.message : String(e), stack: e instanceof Error ? e.stack : undefined });
  return toolError('error (internal): the call failed inside Berth; the operator can find it in the server log');
}

function toolError(text: string): CallToolResult {
  return { content: [{ type: 'text', text }], isError: true };
}

type ImageField = { mimeType: string; data: string } & Record<string, unknown>;

/** Top-level fields of a result that are images. */
function imageFields(result: unknown): Array<[string, ImageField]> {
  if (!isPlainObject(result)) return [];
  return Object.entries(result).filter((e): e is [string, ImageField] => {
    const v = e[1];
    return isPlainObject(v) && typeof v.mimeType === 'string' && v.mimeType.startsWith('image/') && typeof v.data === 'string';
  });
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
