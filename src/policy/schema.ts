/**
 * JSON Schema checks for tool arguments, tool results and plan steps (Ajv 8, draft-07).
 *
 * Each distinct schema is compiled once: the cache is keyed by the schema's canonical JSON, so two equal
 * schemas arriving as different objects (a plan re-read from the store) share one validator. The cache is
 * bounded (least recently used schemas are dropped and recompiled on demand) because plans bring schemas
 * from outside.
 *
 * Ajv is configured never to change the value it checks (no coercion, no defaults, no removal of extra
 * properties): the value that passed is the value the executor gets.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { InvalidArgumentError, canonicalJson } from '../core/index.js';
import type { JsonSchema, ToolDefinition } from './types.js';

/** Validators kept; a plan step or tool beyond this recompiles (~1 ms) when next used. */
const CACHE_LIMIT = 2000;
/** Errors quoted in one message; the rest are counted. */
const MAX_ERRORS_SHOWN = 5;

const ajv = new Ajv({
  allErrors: true,
  // Unknown keywords and formats are errors (a typo in a schema must not silently allow everything);
  // type strictness is left off because operator schemas rarely repeat `type: object` next to `properties`.
  strict: false,
  strictSchema: true,
  strictNumbers: true,
  coerceTypes: false,
  useDefaults: false,
  removeAdditional: false,
  // Schemas with an $id are not registered globally, so two different schemas may reuse an $id.
  addUsedSchema: false,
  // Ajv logs to the console by default; the gate does no I/O.
  logger: false,
});

const cache = new Map<string, ValidateFunction>();
/**
 * Fast path by identity for frozen schemas (defineTool and validatePlan deep-freeze theirs), so the per-call
 * check does not re-serialise the schema. Entries die with the schema object.
 */
const byObject = new WeakMap<object, ValidateFunction>();

export type SchemaCheck = { ok: true } | { ok: false; errors: string[] };

/**
 * Compiles (or fetches the cached validator of) a schema. `what` names the schema in the error, e.g.
 * 'tool fs.read inputSchema'. Throws InvalidArgumentError when the schema does not compile.
 */
export function compileSchema(schema: unknown, what: string): ValidateFunction {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw new InvalidArgumentError(`${what} must be a JSON Schema object`, { details: { what } });
  }
  const known = byObject.get(schema);
  if (known) return known;
  const fn = compileByContent(schema, what);
  if (Object.isFrozen(schema)) byObject.set(schema, fn);
  return fn;
}

function compileByContent(schema: object, what: string): ValidateFunction {
  let key: string;
  try {
    key = canonicalJson(schema);
  } catch (e) {
    throw new InvalidArgumentError(`${what} is not JSON: ${(e as Error).message}`, { details: { what }, cause: e });
  }
  const hit = cache.get(key);
  if (hit) {
    // Re-insert to mark as recently used.
    cache.delete(key);
    cache.set(key, hit);
    return hit;
  }
  let fn: ValidateFunction;
  // Ajv keeps its own cache keyed by schema object; compile a private copy so we control its lifetime.
  const own = JSON.parse(key) as JsonSchema;
  try {
    fn = ajv.compile(own);
  } catch (e) {
    throw new InvalidArgumentError(`${what} is not a valid JSON Schema: ${(e as Error).message}`, {
      details: { what },
      cause: e,
    });
  }
  cache.set(key, fn);
  if (cache.size > CACHE_LIMIT) {
    const oldest = cache.keys().next().value as string;
    const old = cache.get(oldest);
    cache.delete(oldest);
    if (old) ajv.removeSchema(old.schema as JsonSchema);
  }
  return fn;
}

/** `/path: must be string`, `/: must have required property 'command'`, `/: must NOT have additional properties (extra)`. */
export function formatAjvError(e: ErrorObject): string {
  const where = e.instancePath === '' ? '/' : e.instancePath;
  let msg = `${where}: ${e.message ?? 'is invalid'}`;
  const p = e.params as Record<string, unknown>;
  if (e.keyword === 'additionalProperties' && typeof p.additionalProperty === 'string') msg += ` (${p.additionalProperty})`;
  else if (e.keyword === 'enum' && Array.isArray(p.allowedValues)) msg += ` (${p.allowedValues.map((v) => JSON.stringify(v)).join(', ')})`;
  else if (e.keyword === 'const') msg += ` (${JSON.stringify(p.allowedValue)})`;
  return msg;
}

/** Runs a compiled validator and turns its errors into readable lines naming the field. */
export function runValidator(fn: ValidateFunction, value: unknown): SchemaCheck {
  if (fn(value)) return { ok: true };
  const errs = fn.errors ?? [];
  // oneOf/anyOf add a summary error after the branch errors; the branch errors name the fields.
  const lines = [...new Set(errs.map(formatAjvError))];
  if (lines.length > MAX_ERRORS_SHOWN) {
    const more = lines.length - MAX_ERRORS_SHOWN;
    lines.length = MAX_ERRORS_SHOWN;
    lines.push(`(${more} more)`);
  }
  return { ok: false, errors: lines.length > 0 ? lines : ['/: is invalid'] };
}

export function validateAgainst(schema: JsonSchema, value: unknown, what = 'schema'): SchemaCheck {
  return runValidator(compileSchema(schema, what), value);
}

/** Checks a call's arguments against the tool's input schema. */
export function validateArgs(tool: ToolDefinition, args: unknown): SchemaCheck {
  return runValidator(compileSchema(tool.inputSchema, `tool ${tool.name} inputSchema`), args);
}

/** Checks an executor's result against the tool's output schema. */
export function validateResult(tool: ToolDefinition, result: unknown): SchemaCheck {
  return runValidator(compileSchema(tool.outputSchema, `tool ${tool.name} outputSchema`), result);
}

/** Validators currently cached (for tests and metrics). */
export function schemaCacheSize(): number {
  return cache.size;
}
