/**
 * The published Cedar schema, generated from a tool set (schema.cedarschema is its rendering for the
 * built-in tools; a test keeps the two equal).
 *
 *   entity Metadata tags String;                       // the session's metadata, one tag per key
 *   entity Session { tenant: String, metadata: Metadata };
 *   entity Tool;
 *   action "read", "write", "irreversible";           // risk groups
 *   action "<tool>" in ["<risk>"] appliesTo { principal: Session, resource: Tool, context: {
 *     args: { …the tool's policy-visible arguments… }, risk: String, planStep?: String,
 *     hourUtc: Long, callsInSession: Long } };
 *
 * Each tool action gets its own `args` record, derived from the top level of its input schema, so strict
 * validation knows that `context.args.command` exists for shell.exec and refuses a policy that reads it
 * for fs.read without `has`. Arguments map as: string → String, integer → Long, boolean → Bool, array of
 * those → Set, except an array of exactly 2 integers (a point [x, y]) → {x: Long, y: Long} and of exactly 4
 * (a region [x0, y0, x1, y1]) → {x0, y0, x1, y1}, since a Set would lose which number is which; arguments of other shapes (objects such as env or headers, numbers, unions) and the
 * tool's opaqueArgs are not visible to policy. An argument is required when the input schema requires it.
 */
import { InvalidArgumentError } from '../core/index.js';
import type { CedarValueJson, SchemaJson, TypeOfAttribute } from '@cedar-policy/cedar-wasm/nodejs';
import { RISKS, type ToolDefinition } from './types.js';

/** The Cedar action of a new outbound connection (policy/egress.ts re-exports it). */
export const NET_CONNECT = 'net.connect';

type Scalar = 'String' | 'Long' | 'Boolean';
type Shape = 'Point' | 'Region';
interface ArgSpec {
  name: string;
  kind: Scalar | `Set<${Scalar}>` | Shape;
  required: boolean;
}

const SHAPE_FIELDS: Readonly<Record<Shape, readonly string[]>> = { Point: ['x', 'y'], Region: ['x0', 'y0', 'x1', 'y1'] };

/** An integer array of fixed length 2 or 4: a point or a region. */
function shapeOf(s: Record<string, unknown>): Shape | undefined {
  if (scalarOf(s.items) !== 'Long' || s.minItems !== s.maxItems) return undefined;
  return s.minItems === 2 ? 'Point' : s.minItems === 4 ? 'Region' : undefined;
}

/** How one tool's arguments appear in Cedar: the record type and the projection of a call's arguments. */
export interface ArgsProjection {
  readonly specs: readonly ArgSpec[];
  readonly type: TypeOfAttribute<string>;
  /** Throws InvalidArgumentError when a value cannot be represented (an integer outside ±2^53). */
  project(args: Record<string, unknown>): Record<string, CedarValueJson>;
}

function scalarOf(s: unknown): Scalar | undefined {
  if (typeof s !== 'object' || s === null) return undefined;
  const t = (s as Record<string, unknown>).type;
  if (t === 'string') return 'String';
  if (t === 'integer') return 'Long';
  if (t === 'boolean') return 'Boolean';
  return undefined;
}

function cedarType(kind: ArgSpec['kind']): TypeOfAttribute<string> {
  if (kind === 'Point' || kind === 'Region') {
    return { type: 'Record', attributes: Object.fromEntries(SHAPE_FIELDS[kind].map((f) => [f, { type: 'Long', required: true }])) } as TypeOfAttribute<string>;
  }
  if (kind.startsWith('Set<')) return { type: 'Set', element: { type: kind.slice(4, -1) as Scalar } };
  return { type: kind as Scalar };
}

function projectValue(tool: string, name: string, kind: ArgSpec['kind'], v: unknown): CedarValueJson {
  const scalar = (x: unknown, k: Scalar): CedarValueJson => {
    if (k === 'String' && typeof x === 'string') return x;
    if (k === 'Boolean' && typeof x === 'boolean') return x;
    if (k === 'Long' && Number.isSafeInteger(x)) return x as number;
    throw new InvalidArgumentError(`argument ${name} of ${tool} cannot be shown to policy (expected ${k}, integers within ±2^53)`, {
      details: { tool, argument: name },
    });
  };
  if (kind === 'Point' || kind === 'Region') {
    const fields = SHAPE_FIELDS[kind];
    if (!Array.isArray(v) || v.length !== fields.length) throw new InvalidArgumentError(`argument ${name} of ${tool} must be an array of ${fields.length} integers`, { details: { tool, argument: name } });
    return Object.fromEntries(fields.map((f, i) => [f, scalar(v[i], 'Long')]));
  }
  if (kind.startsWith('Set<')) {
    if (!Array.isArray(v)) throw new InvalidArgumentError(`argument ${name} of ${tool} must be an array`, { details: { tool, argument: name } });
    const k = kind.slice(4, -1) as Scalar;
    return v.map((x) => scalar(x, k));
  }
  return scalar(v, kind as Scalar);
}

export function argsProjection(tool: ToolDefinition): ArgsProjection {
  const props = (tool.inputSchema.properties ?? {}) as Record<string, unknown>;
  const required = new Set(Array.isArray(tool.inputSchema.required) ? (tool.inputSchema.required as string[]) : []);
  const opaque = new Set(tool.opaqueArgs ?? []);
  const specs: ArgSpec[] = [];
  for (const [name, s] of Object.entries(props)) {
    if (opaque.has(name)) continue;
    let kind: ArgSpec['kind'] | undefined = scalarOf(s);
    if (!kind && (s as Record<string, unknown> | null)?.type === 'array') {
      const el = scalarOf((s as Record<string, unknown>).items);
      if (el) kind = shapeOf(s as Record<string, unknown>) ?? `Set<${el}>`;
    }
    if (kind) specs.push({ name, kind, required: required.has(name) });
  }
  specs.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const attributes: Record<string, TypeOfAttribute<string>> = {};
  for (const s of specs) attributes[s.name] = { ...cedarType(s.kind), required: s.required };
  const name = tool.name;
  return Object.freeze({
    specs: Object.freeze(specs),
    type: { type: 'Record', attributes } as TypeOfAttribute<string>,
    project(args: Record<string, unknown>): Record<string, CedarValueJson> {
      const out: Record<string, CedarValueJson> = {};
      for (const s of specs) {
        const v = args[s.name];
        if (v !== undefined) out[s.name] = projectValue(name, s.name, s.kind, v);
      }
      return out;
    },
  });
}

function contextType(args: TypeOfAttribute<string>, extra: Record<string, TypeOfAttribute<string>> = {}): TypeOfAttribute<string> {
  return {
    type: 'Record',
    attributes: {
      ...extra,
      args,
      risk: { type: 'String', required: true },
      planStep: { type: 'String', required: false },
      hourUtc: { type: 'Long', required: true },
      callsInSession: { type: 'Long', required: true },
    },
  } as TypeOfAttribute<string>;
}

/** The Cedar schema (JSON form, global namespace) for a tool set. Tool names must be unique. */
export function cedarSchemaFor(tools: readonly ToolDefinition[]): SchemaJson<string> {
  const actions: Record<string, unknown> = {};
  for (const r of RISKS) actions[r] = {};
  for (const t of [...tools].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    if (t.name in actions) throw new InvalidArgumentError(`tool ${JSON.stringify(t.name)} is defined twice`, { details: { tool: t.name } });
    actions[t.name] = {
      memberOf: [{ id: t.risk }],
      appliesTo: { principalTypes: ['Session'], resourceTypes: ['Tool'], context: contextType(argsProjection(t).type) },
    };
  }
  // net.connect (policy/egress.ts): every new outbound connection. In the "write" group so group rules
  // cover it; host, port and method are shown at the top of the context and, for rules written against
  // tools, in args too.
  if (NET_CONNECT in actions) throw new InvalidArgumentError(`tool ${JSON.stringify(NET_CONNECT)} is reserved`, { details: { tool: NET_CONNECT } });
  const c = NET_CONNECT_PROJECTION.type as { attributes: Record<string, TypeOfAttribute<string>> };
  actions[NET_CONNECT] = {
    memberOf: [{ id: 'write' }],
    appliesTo: { principalTypes: ['Session'], resourceTypes: ['Tool'], context: contextType(NET_CONNECT_PROJECTION.type, c.attributes) },
  };
  return {
    '': {
      entityTypes: {
        Metadata: { tags: { type: 'String' } },
        Session: {
          shape: {
            type: 'Record',
            attributes: { tenant: { type: 'String', required: true }, metadata: { type: 'Entity', name: 'Metadata', required: true } },
          },
        },
        Tool: {},
      },
      actions,
    },
  } as SchemaJson<string>;
}

/** What Cedar sees of a connection: {host, port, method?}, as a tool-shaped definition so it projects like one. */
export const NET_CONNECT_DEFINITION: ToolDefinition = Object.freeze({
  name: NET_CONNECT,
  description: 'a new outbound connection from the session (not a tool the agent calls)',
  inputSchema: { type: 'object', required: ['host', 'port'], properties: { host: { type: 'string' }, port: { type: 'integer' }, method: { type: 'string' } } },
  outputSchema: {},
  risk: 'write',
  executor: { kind: 'builtin', name: 'http.request' },
}) as ToolDefinition;
export const NET_CONNECT_PROJECTION: ArgsProjection = argsProjection(NET_CONNECT_DEFINITION);
