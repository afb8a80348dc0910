/**
 * Tool definitions: checked once, when defined (built-ins at load, operator tools when registered), so that
 * evaluate() can trust them. A definition whose schemas do not compile is refused, never patched up.
 */
import { InvalidArgumentError } from '../core/index.js';
import { deepFreeze } from './freeze.js';
import { compileSchema } from './schema.js';
import { RISKS, type BuiltinToolName, type JsonSchema, type ToolDefinition, type ToolExecutor } from './types.js';

/** Dotted lower-case segments: `shell.exec`, `acme.deploy-site`. */
const TOOL_NAME_RE = /^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$/;
const MAX_TOOL_NAME = 64;
/** The Cedar action groups (a tool of the same name would be its own group) and net.connect (egress). */
const RESERVED_NAMES: ReadonlySet<string> = new Set([...RISKS, 'net.connect']);
const BUILTIN_EXECUTORS: ReadonlySet<string> = new Set(['shell.exec', 'fs.read', 'fs.write', 'fs.list', 'http.request', 'computer']);
const DEFINITION_KEYS: ReadonlySet<string> = new Set([
  'name',
  'description',
  'inputSchema',
  'outputSchema',
  'risk',
  'executor',
  'pathArgs',
  'opaqueArgs',
  'imageResults',
]);

function bad(name: string, field: string, message: string, cause?: unknown): InvalidArgumentError {
  return new InvalidArgumentError(`tool ${JSON.stringify(name)}: ${field} ${message}`, { details: { tool: name, field }, cause });
}

export function isValidToolName(name: unknown): name is string {
  return typeof name === 'string' && name.length <= MAX_TOOL_NAME && TOOL_NAME_RE.test(name) && !RESERVED_NAMES.has(name);
}

function checkExecutor(name: string, ex: unknown): ToolExecutor {
  if (typeof ex !== 'object' || ex === null) throw bad(name, 'executor', 'must be an object');
  const e = ex as Record<string, unknown>;
  if (e.kind === 'builtin') {
    if (typeof e.name !== 'string' || !BUILTIN_EXECUTORS.has(e.name)) {
      throw bad(name, 'executor.name', `must be one of ${[...BUILTIN_EXECUTORS].join(', ')}`);
    }
    return Object.freeze({ kind: 'builtin', name: e.name as BuiltinToolName });
  }
  if (e.kind === 'command') {
    if (!Array.isArray(e.argv) || e.argv.length === 0 || !e.argv.every((a) => typeof a === 'string') || e.argv[0] === '') {
      throw bad(name, 'executor.argv', 'must be a non-empty array of strings');
    }
    if (e.timeoutMs !== undefined && (!Number.isSafeInteger(e.timeoutMs) || (e.timeoutMs as number) <= 0)) {
      throw bad(name, 'executor.timeoutMs', 'must be a positive integer (milliseconds)');
    }
    const out: ToolExecutor = { kind: 'command', argv: Object.freeze([...(e.argv as string[])]) as string[] };
    if (e.timeoutMs !== undefined) out.timeoutMs = e.timeoutMs as number;
    return Object.freeze(out);
  }
  throw bad(name, 'executor.kind', 'must be "builtin" or "command"');
}

function checkArgList(name: string, field: string, list: unknown, props: Record<string, unknown>, schema = 'inputSchema'): readonly string[] | undefined {
  if (list === undefined) return undefined;
  if (!Array.isArray(list) || !list.every((a) => typeof a === 'string')) throw bad(name, field, 'must be an array of strings');
  for (const a of list as string[]) {
    if (!(a in props)) throw bad(name, field, `names ${JSON.stringify(a)}, which is not a property of ${schema}`);
  }
  return Object.freeze([...(list as string[])]);
}

/**
 * Checks a tool definition and returns a frozen copy. Throws InvalidArgumentError naming the bad field:
 * an invalid name, a schema that does not compile, an input schema that is not an object schema, a path
 * or opaque argument the input schema does not declare.
 *
 * `deferCompile` is for Berth's own tools, defined as their modules load: compiling their schemas there (Ajv
 * checks each against the meta-schema and generates code) took about a third of a second of every server
 * start. Their validators are then compiled at first use or by compileToolSchemas; a test compiles them all.
 */
export function defineTool(def: unknown, opts: { deferCompile?: boolean } = {}): ToolDefinition {
  if (typeof def !== 'object' || def === null || Array.isArray(def)) throw new InvalidArgumentError('a tool definition must be an object');
  const d = def as Record<string, unknown>;
  const name = typeof d.name === 'string' ? d.name : String(d.name);
  for (const k of Object.keys(d)) if (!DEFINITION_KEYS.has(k)) throw bad(name, k, 'is not a tool definition field');
  if (!isValidToolName(d.name)) {
    throw bad(name, 'name', `must be dotted lower-case segments (e.g. "acme.deploy"), at most ${MAX_TOOL_NAME} characters, and not read/write/irreversible`);
  }
  if (typeof d.description !== 'string' || d.description.trim() === '') throw bad(name, 'description', 'must be a non-empty string');
  if (typeof d.risk !== 'string' || !(RISKS as readonly string[]).includes(d.risk)) throw bad(name, 'risk', `must be one of ${RISKS.join(', ')}`);
  const input = d.inputSchema;
  if (typeof input !== 'object' || input === null || Array.isArray(input) || (input as Record<string, unknown>).type !== 'object') {
    throw bad(name, 'inputSchema', 'must be a JSON Schema with type "object" (arguments are a JSON object)');
  }
  if (!opts.deferCompile) compileToolSchemas({ name, inputSchema: input, outputSchema: d.outputSchema });
  const props = ((input as Record<string, unknown>).properties ?? {}) as Record<string, unknown>;
  const pathArgs = checkArgList(name, 'pathArgs', d.pathArgs, props);
  const opaqueArgs = checkArgList(name, 'opaqueArgs', d.opaqueArgs, props);
  const outProps = ((d.outputSchema as Record<string, unknown> | null)?.properties ?? {}) as Record<string, unknown>;
  const imageResults = checkArgList(name, 'imageResults', d.imageResults, outProps, 'outputSchema');
  const out: ToolDefinition = {
    name: d.name,
    description: d.description,
    inputSchema: deepFreeze(structuredClone(input) as JsonSchema),
    outputSchema: deepFreeze(structuredClone(d.outputSchema) as JsonSchema),
    risk: d.risk as ToolDefinition['risk'],
    executor: checkExecutor(name, d.executor),
  };
  if (pathArgs) out.pathArgs = pathArgs;
  if (opaqueArgs) out.opaqueArgs = opaqueArgs;
  if (imageResults) out.imageResults = imageResults;
  return Object.freeze(out);
}

/** Compiles (or finds cached) a tool's input and output validators; throws as defineTool does for a bad schema. */
export function compileToolSchemas(t: { name: string; inputSchema: unknown; outputSchema: unknown }): void {
  compileSchema(t.inputSchema, `tool ${t.name} inputSchema`);
  compileSchema(t.outputSchema, `tool ${t.name} outputSchema`);
}
