/**
 * The built-in tools. Their schemas are the contract with the agent (arguments) and with the engine's
 * executors (results); their risks decide the Cedar action group and so what the default policy does.
 *
 * Risks, and why they are static:
 * - `fs.read`, `fs.list`: 'read'. They change nothing.
 * - `fs.write`: 'write'. It changes files inside the session's own sandbox only.
 * - `shell.exec`: 'write'. A command can change anything inside the sandbox, but nothing outside it (no
 *   network unless the operator grants it; the sandbox is the boundary). Calling every command
 *   'irreversible' would send every `ls` to a human, so that is left to policy (see default-policy.cedar,
 *   which forbids a handful of obviously destructive commands).
 * - `http.request`: 'write'. A request leaves the sandbox (to allow-listed hosts only), so it is not 'read',
 *   but how dangerous it is depends on the method. Risk cannot depend on the arguments: Cedar takes an
 *   action's group (`Action::"write"`) from the schema, not from the request, so a per-call risk would make
 *   `action in Action::"read"` lie. Policies see `context.args.method` instead; the default policy permits
 *   GET and HEAD and sends every other method to approval.
 */
import { defineTool } from './tools.js';
import type { BuiltinToolName, JsonSchema, ToolDefinition } from './types.js';

const PATH: JsonSchema = { type: 'string', minLength: 1, maxLength: 4096 };
const BASE64: JsonSchema = { type: 'string', pattern: '^[A-Za-z0-9+/]*={0,2}$' };
const STRING_MAP: JsonSchema = { type: 'object', additionalProperties: { type: 'string' } };

export const SHELL_EXEC = defineTool({
  name: 'shell.exec',
  description:
    'Runs a command with /bin/sh -c inside the sandbox and returns its exit code and output. ' +
    'A non-zero exit code is reported, not raised; stdout and stderr are cut at the output cap (truncated: true).',
  risk: 'write',
  executor: { kind: 'builtin', name: 'shell.exec' },
  inputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['command'],
    properties: {
      command: { type: 'string', minLength: 1, maxLength: 262144, description: 'Run by /bin/sh -c.' },
      cwd: { ...PATH, description: 'Working directory; default the session home.' },
      env: { ...STRING_MAP, propertyNames: { pattern: '^[A-Za-z_][A-Za-z0-9_]*$' }, description: 'Merged over the sandbox environment.' },
      timeoutMs: { type: 'integer', minimum: 1, maximum: 86400000, description: 'Kill the command after this many milliseconds.' },
    },
  },
  outputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['exitCode', 'stdout', 'stderr', 'timedOut', 'truncated'],
    properties: {
      exitCode: { type: 'integer', minimum: 0, maximum: 255 },
      stdout: { type: 'string' },
      stderr: { type: 'string' },
      timedOut: { type: 'boolean' },
      truncated: { type: 'boolean' },
    },
  },
  pathArgs: ['cwd'],
});

export const FS_READ = defineTool({
  name: 'fs.read',
  description:
    'Reads a file inside the sandbox. Text comes back as content, anything that is not valid UTF-8 as contentBase64; ' +
    'size is the whole file in bytes, truncated says the content was cut at the read cap.',
  risk: 'read',
  executor: { kind: 'builtin', name: 'fs.read' },
  inputSchema: { type: 'object', additionalProperties: false, required: ['path'], properties: { path: PATH } },
  outputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['path', 'size', 'truncated'],
    properties: {
      path: { type: 'string' },
      content: { type: 'string' },
      contentBase64: BASE64,
      size: { type: 'integer', minimum: 0 },
      truncated: { type: 'boolean' },
    },
    oneOf: [{ required: ['content'] }, { required: ['contentBase64'] }],
  },
  pathArgs: ['path'],
});

export const FS_WRITE = defineTool({
  name: 'fs.write',
  description: 'Writes a whole file inside the sandbox atomically, from text (content) or bytes (contentBase64).',
  risk: 'write',
  executor: { kind: 'builtin', name: 'fs.write' },
  inputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['path'],
    properties: { path: PATH, content: { type: 'string' }, contentBase64: BASE64 },
    oneOf: [{ required: ['content'] }, { required: ['contentBase64'] }],
  },
  outputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['path', 'bytesWritten'],
    properties: { path: { type: 'string' }, bytesWritten: { type: 'integer', minimum: 0 } },
  },
  pathArgs: ['path'],
  opaqueArgs: ['content', 'contentBase64'],
});

export const FS_LIST = defineTool({
  name: 'fs.list',
  description: 'Lists a directory inside the sandbox.',
  risk: 'read',
  executor: { kind: 'builtin', name: 'fs.list' },
  inputSchema: { type: 'object', additionalProperties: false, required: ['path'], properties: { path: PATH } },
  outputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['path', 'entries', 'truncated'],
    properties: {
      path: { type: 'string' },
      entries: {
        type: 'array',
        items: {
          type: 'object',
          additionalProperties: false,
          required: ['name', 'type', 'size', 'mode', 'mtimeMs'],
          properties: {
            name: { type: 'string', minLength: 1 },
            type: { enum: ['file', 'dir', 'symlink', 'other'] },
            size: { type: 'integer', minimum: 0 },
            mode: { type: 'integer', minimum: 0 },
            mtimeMs: { type: 'number' },
          },
        },
      },
      truncated: { type: 'boolean' },
    },
  },
  pathArgs: ['path'],
});

export const HTTP_REQUEST = defineTool({
  name: 'http.request',
  description:
    'Sends an HTTP request to an allow-listed host and returns the response. Text bodies come back as body, ' +
    'others as bodyBase64; truncated says the body was cut at the response cap.',
  risk: 'write',
  executor: { kind: 'builtin', name: 'http.request' },
  inputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['method', 'url'],
    properties: {
      method: { enum: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'], type: 'string' },
      url: { type: 'string', maxLength: 8192, pattern: '^https?://[^\\s/?#]+([/?#][^\\s]*)?$' },
      headers: STRING_MAP,
      body: { type: 'string' },
    },
  },
  outputSchema: {
    type: 'object',
    additionalProperties: false,
    required: ['status', 'headers', 'truncated'],
    properties: {
      status: { type: 'integer', minimum: 100, maximum: 599 },
      headers: STRING_MAP,
      body: { type: 'string' },
      bodyBase64: BASE64,
      truncated: { type: 'boolean' },
    },
    oneOf: [{ required: ['body'] }, { required: ['bodyBase64'] }],
  },
  opaqueArgs: ['body'],
});

export const BUILTIN_TOOLS: readonly ToolDefinition[] = Object.freeze([SHELL_EXEC, FS_READ, FS_WRITE, FS_LIST, HTTP_REQUEST]);

const BY_NAME: ReadonlyMap<string, ToolDefinition> = new Map(BUILTIN_TOOLS.map((t) => [t.name, t]));

export function builtinTool(name: BuiltinToolName): ToolDefinition;
export function builtinTool(name: string): ToolDefinition | undefined;
export function builtinTool(name: string): ToolDefinition | undefined {
  return BY_NAME.get(name);
}
