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
import { COMPUTER } from './computer-tool.js';
import { defineTool } from './tools.js';
import type { BuiltinToolName, JsonSchema, ToolDefinition } from './types.js';

const PATH: JsonSchema = { type: 'string', minLength: 1, maxLength: 4096 };
const BASE64: JsonSchema = { type: 'string', pattern: '^[A-Za-z0-9+/]*={0,2}$' };
const STRING_MAP: JsonSchema = { type: 'object', additionalProperties: { type: 'string' } };

/** The fields of one output stream of shell.exec (see engine/exec-output.ts). */
function streamProps(name: 'stdout' | 'stderr'): Record<string, JsonSchema> {
  return {
    [name]: { type: 'string', description: `The ${name} text (its first part when truncated), when it is valid UTF-8.` },
    [`${name}Tail`]: { type: 'string', description: `The last part of ${name}, when truncated.` },
    [`${name}Base64`]: { ...BASE64, description: `${name} (its first part when truncated) as base64, when it is not valid UTF-8.` },
    [`${name}TailBase64`]: { ...BASE64, description: `The last part of ${name} as base64, when truncated and not valid UTF-8.` },
    [`${name}Bytes`]: { type: 'integer', minimum: 0, description: `Every byte the command wrote to ${name}.` },
    [`${name}OmittedBytes`]: { type: 'integer', minimum: 1, description: `Bytes of ${name} left out between the first and last parts.` },
  };
}
/** Exactly one of text and base64; a tail (in the same form) exactly when bytes were left out. */
function streamRules(name: 'stdout' | 'stderr'): { oneOf: JsonSchema; dependencies: Record<string, unknown> } {
  return {
    oneOf: { oneOf: [{ required: [name] }, { required: [`${name}Base64`] }] },
    dependencies: {
      [`${name}Tail`]: [name, `${name}OmittedBytes`],
      [`${name}TailBase64`]: [`${name}Base64`, `${name}OmittedBytes`],
      [`${name}OmittedBytes`]: { anyOf: [{ required: [`${name}Tail`] }, { required: [`${name}TailBase64`] }] },
    },
  };
}
const OUT = streamRules('stdout');
const ERR = streamRules('stderr');

export const SHELL_EXEC = defineTool({
  name: 'shell.exec',
  description:
    'Runs a command with /bin/sh -c inside the sandbox and returns its exit code and output. ' +
    'A non-zero exit code is reported, not raised. Output past the cap does not stop the command: each stream then keeps ' +
    'its first part (stdout) and last part (stdoutTail), with truncated: true and the count left out (stdoutOmittedBytes); ' +
    'stdoutBytes is every byte written. Output that is not valid UTF-8 comes as base64 (stdoutBase64, stdoutTailBase64). ' +
    'The same for stderr.',
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
    required: ['exitCode', 'timedOut', 'truncated', 'stdoutBytes', 'stderrBytes'],
    properties: {
      exitCode: { type: 'integer', minimum: 0, maximum: 255 },
      timedOut: { type: 'boolean' },
      truncated: { type: 'boolean', description: 'Some output was left out (see stdoutOmittedBytes, stderrOmittedBytes).' },
      ...streamProps('stdout'),
      ...streamProps('stderr'),
    },
    allOf: [OUT.oneOf, ERR.oneOf],
    dependencies: { ...OUT.dependencies, ...ERR.dependencies },
  },
  pathArgs: ['cwd'],
}, { deferCompile: true });

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
}, { deferCompile: true });

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
}, { deferCompile: true });

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
}, { deferCompile: true });

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
}, { deferCompile: true });

export const BUILTIN_TOOLS: readonly ToolDefinition[] = Object.freeze([SHELL_EXEC, FS_READ, FS_WRITE, FS_LIST, HTTP_REQUEST, COMPUTER]);

const BY_NAME: ReadonlyMap<string, ToolDefinition> = new Map(BUILTIN_TOOLS.map((t) => [t.name, t]));

export function builtinTool(name: BuiltinToolName): ToolDefinition;
export function builtinTool(name: string): ToolDefinition | undefined;
export function builtinTool(name: string): ToolDefinition | undefined {
  return BY_NAME.get(name);
}
