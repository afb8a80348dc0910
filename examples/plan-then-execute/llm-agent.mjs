#!/usr/bin/env node
// A real model as the agent of the Plan-then-Execute scenario: an OpenAI-compatible chat-completions loop
// whose tools are the Berth session's MCP tools. Berth stays the gate; the model only chooses calls.
//
//   BERTH_URL       Berth server (default http://127.0.0.1:7070)
//   BERTH_SESSION   the session id
//   BERTH_TOKEN     the session's agent token (it can list and call that session's tools, nothing else)
//   OPENAI_API_KEY  your key for the endpoint (required)
//   OPENAI_BASE_URL default https://api.openai.com/v1 (any OpenAI-compatible endpoint: vLLM, Ollama, …)
//   OPENAI_MODEL    default gpt-4o-mini
//   MAX_TURNS       model turns before giving up (default 12)
//
// run.sh --llm starts it with those set and plays the operator. Nothing here can get past the gate: a call
// the plan does not allow comes back to the model as a tool error it can read.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const env = (k, d) => process.env[k] || d;
const berthUrl = env('BERTH_URL', 'http://127.0.0.1:7070').replace(/\/+$/, '');
const sessionId = env('BERTH_SESSION');
const token = env('BERTH_TOKEN');
const apiKey = env('OPENAI_API_KEY');
const baseUrl = env('OPENAI_BASE_URL', 'https://api.openai.com/v1').replace(/\/+$/, '');
const model = env('OPENAI_MODEL', 'gpt-4o-mini');
const maxTurns = Number(env('MAX_TURNS', '12'));
for (const [k, v] of Object.entries({ BERTH_SESSION: sessionId, BERTH_TOKEN: token, OPENAI_API_KEY: apiKey })) {
  if (!v) {
    console.error(`llm-agent: ${k} is not set`);
    process.exit(2);
  }
}

const say = (line) => console.log(`[agent:llm] ${line}`);
const clip = (s, n = 160) => (s.length > n ? `${s.slice(0, n - 1)}…` : s).replace(/\n/g, ' ');
const text = (r) => r.content.map((c) => (c.type === 'text' ? c.text : `[${c.type}]`)).join('\n');

const mcp = new Client({ name: 'berth-llm-agent', version: '0.1.0' });
await mcp.connect(
  new StreamableHTTPClientTransport(new URL(`${berthUrl}/v1/sessions/${encodeURIComponent(sessionId)}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
  }),
);
const { tools } = await mcp.listTools();

// OpenAI function names allow [A-Za-z0-9_-] only; Berth's are dotted. Map them, and back through a table.
const toFn = new Map();
const fromFn = new Map();
for (const t of tools) {
  const fn = t.name.replace(/\./g, '__');
  if (fromFn.has(fn)) throw new Error(`two tools map to the function name ${fn}`);
  toFn.set(t.name, fn);
  fromFn.set(fn, t.name);
}
const functions = tools.map((t) => ({ type: 'function', function: { name: toFn.get(t.name), description: t.description, parameters: t.inputSchema } }));

const messages = [
  {
    role: 'system',
    content:
      'You are an autonomous assistant working inside an isolated machine through tools. Complete the task with the ' +
      'tools; when a tool returns an error, read it and adapt. When the task is done, answer with a one-line report.',
  },
  {
    role: 'user',
    content:
      'Read /work/inbox/q3-report.md, write a short bullet summary of it to /work/out/q3-summary.md, then publish that ' +
      'file with report.publish (title "Q3 summary").',
  },
];

async function chat() {
  const res = await fetch(`${baseUrl}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages, tools: functions, tool_choice: 'auto' }),
  });
  if (!res.ok) throw new Error(`${baseUrl}/chat/completions answered ${res.status}: ${clip(await res.text(), 400)}`);
  const body = await res.json();
  return body.choices[0].message;
}

/** A call parked for approval: wait for the operator's decision, then make the same call again for its result. */
async function settle(name, args, first) {
  const approvalId = first._meta?.['berth/decision']?.approvalId;
  if (!approvalId) return first;
  say(`${name} waits for approval ${approvalId}; polling berth.approval_status`);
  for (;;) {
    await new Promise((r) => setTimeout(r, 2000));
    const s = await mcp.callTool({ name: 'berth.approval_status', arguments: { approvalId } });
    const status = s.structuredContent?.status;
    if (status === 'pending') continue;
    say(`approval ${approvalId}: ${status}`);
    return mcp.callTool({ name, arguments: args });
  }
}

let finished = false;
for (let turn = 1; turn <= maxTurns && !finished; turn++) {
  const msg = await chat();
  messages.push(msg);
  if (!msg.tool_calls?.length) {
    say(`done: ${clip(msg.content ?? '', 400)}`);
    finished = true;
    break;
  }
  for (const call of msg.tool_calls) {
    const name = fromFn.get(call.function.name) ?? call.function.name;
    let args;
    try {
      args = JSON.parse(call.function.arguments || '{}');
    } catch {
      args = {};
    }
    say(`${name} ${clip(JSON.stringify(args), 120)}`);
    let r = await mcp.callTool({ name, arguments: args });
    if (r.isError && r._meta?.['berth/decision']?.decision === 'pending') r = await settle(name, args, r);
    const out = text(r);
    say(`  → ${r.isError ? 'ERROR ' : ''}${clip(out)}`);
    messages.push({ role: 'tool', tool_call_id: call.id, content: out });
  }
}
await mcp.close();
if (!finished) say(`gave up after ${maxTurns} turns`);
process.exit(finished ? 0 : 1);
