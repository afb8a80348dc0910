/**
 * The OpenAPI 3.1 document, generated from the route table (openapi-routes.ts) and the zod schemas it
 * names (z.toJSONSchema, JSON Schema 2020-12, the dialect of OpenAPI 3.1). Request bodies and query
 * strings are described on their input side (what a client sends), views on their output side.
 */
import * as z from 'zod';
import { ERROR_CODES } from '../core/errors.js';
import { EXEC_HEARTBEAT_MS, NDJSON } from './exec.js';
import { ROUTES, type Body, type RouteDoc } from './openapi-routes.js';
import * as V from './view-schemas.js';

type Json = Record<string, unknown>;

/** Views published under components.schemas (routes refer to them by name). */
const COMPONENTS: Record<string, z.ZodType> = {
  Session: V.SessionViewSchema,
  CreatedSession: V.CreatedSessionViewSchema,
  SessionList: V.SessionListViewSchema,
  Terminated: V.TerminatedViewSchema,
  Snapshot: V.SnapshotViewSchema,
  SnapshotList: V.SnapshotListViewSchema,
  Fork: V.ForkViewSchema,
  Error: V.ErrorBodySchema,
  ExecStreamLine: V.ExecStreamLineSchema,
  Stdin: V.StdinViewSchema,
  Kill: V.KillViewSchema,
  FileList: V.FileListViewSchema,
  FileStat: V.FileStatViewSchema,
  FileWrite: V.FileWriteViewSchema,
  Ok: V.OkViewSchema,
  Tenant: V.TenantViewSchema,
  CreatedTenant: V.CreatedTenantViewSchema,
  TenantList: V.TenantListViewSchema,
  AuditEntry: V.AuditEntryViewSchema,
  AuditList: V.AuditListViewSchema,
  AuditVerify: V.AuditVerifyViewSchema,
  AuditKey: V.AuditKeyViewSchema,
  SignedHead: V.SignedHeadViewSchema,
  InclusionProof: V.InclusionProofViewSchema,
  ConsistencyProof: V.ConsistencyProofViewSchema,
  Health: V.HealthViewSchema,
  ToolList: V.ToolListViewSchema,
  CallResult: V.CallResultViewSchema,
  Approval: V.ApprovalViewSchema,
  ApprovalList: V.ApprovalListViewSchema,
  Policy: V.PolicyViewSchema,
  ToolDefinition: V.ToolDefinitionViewSchema,
  ToolDefinitionList: V.ToolDefinitionListViewSchema,
  Gate: V.GateViewSchema,
  Plan: V.PlanViewSchema,
  BackgroundExec: V.BackgroundExecViewSchema,
  Process: V.ProcessViewSchema,
  ProcessList: V.ProcessListViewSchema,
  ProcessKill: V.ProcessKillViewSchema,
  ProcessOutputLine: V.ProcessOutputLineSchema,
  TarPush: V.TarPushViewSchema,
  WatchLine: V.WatchLineSchema,
};
const NAMES = new Map<z.ZodType, string>(Object.entries(COMPONENTS).map(([k, v]) => [v, k]));

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Json {
  const s = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as Json;
  delete s.$schema;
  return s;
}

function schemaFor(schema: z.ZodType, io: 'input' | 'output'): Json {
  const name = io === 'output' ? NAMES.get(schema) : undefined;
  return name ? { $ref: `#/components/schemas/${name}` } : jsonSchema(schema, io);
}

/** /v1/sessions/:id → /v1/sessions/{id} */
export function openApiPath(honoPath: string): string {
  return honoPath.replace(/:([A-Za-z_]+)/g, '{$1}');
}

function parameters(r: RouteDoc): Json[] {
  const out: Json[] = [...r.path.matchAll(/:([A-Za-z_]+)/g)].map((m) => ({ name: m[1], in: 'path', required: true, schema: { type: 'string' } }));
  if (r.query) {
    const q = jsonSchema(r.query, 'input') as { properties?: Record<string, Json>; required?: string[] };
    for (const [name, schema] of Object.entries(q.properties ?? {})) {
      const p: Json = { name, in: 'query', required: q.required?.includes(name) ?? false, schema };
      if (schema.type === 'array') Object.assign(p, { style: 'form', explode: true });
      if (typeof schema.description === 'string') p.description = schema.description;
      out.push(p);
    }
  }
  if (r.idempotent) out.push(IDEMPOTENCY_KEY_PARAM);
  return out;
}

/** The Idempotency-Key header (issue 7 §11): rules in src/engine/idempotency.ts, summed up here for clients. */
const IDEMPOTENCY_KEY_PARAM: Json = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x20-\\x7e]{1,255}$' },
  description:
    'Makes a retry safe: kept 24 h per tenant and route. A retry with the same key and body gets the first answer again (header Idempotent-Replayed: true) and does nothing twice; ' +
    'the same key with another body is 422 idempotency_mismatch; while the first still runs, 409 conflict (retryable). A request that did not run (refused before anything was done) frees the key.',
};

function content(b: Body, io: 'input' | 'output'): Json {
  switch (b.kind) {
    case 'json':
      return { 'application/json': { schema: schemaFor(b.schema, io) } };
    case 'bytes': {
      const media = b.mediaType ?? 'application/octet-stream';
      return { [media]: { schema: { type: 'string', contentMediaType: media } } };
    }
    case 'ndjson': {
      const name = NAMES.get(b.line);
      const each = name ? `a ${name} (#/components/schemas/${name})` : 'one JSON object';
      return { [NDJSON]: { schema: { type: 'string', contentMediaType: NDJSON, description: `Newline-delimited JSON; every line is ${each}. A quiet stream carries a ping line every ${EXEC_HEARTBEAT_MS} ms.` }, 'x-berth-line-schema': schemaFor(b.line, 'output') } };
    }
    case 'cedar':
      return { 'text/plain': { schema: { type: 'string', description: 'Cedar policy text' } }, 'application/json': { schema: schemaFor(b.schema, io) } };
    case 'either':
      return Object.assign({}, ...b.bodies.map((x) => content(x, io))) as Json;
  }
}

function operation(r: RouteDoc): Json {
  const op: Json = { operationId: operationId(r), summary: r.summary, tags: [r.tag] };
  if (r.description) op.description = r.description;
  const params = parameters(r);
  if (params.length) op.parameters = params;
  if (r.body) op.requestBody = { required: r.body.kind !== 'json', ...(r.body.description ? { description: r.body.description } : {}), content: content(r.body, 'input') };
  const responses: Json = {};
  for (const [status, b] of Object.entries(r.responses)) {
    responses[status] = b.kind === 'none' ? { description: b.description } : { description: b.description ?? 'success', content: content(b, 'output') };
  }
  responses.default = { $ref: '#/components/responses/Error' };
  op.responses = responses;
  op.security = r.auth === 'none' ? [] : [{ bearer: [] }];
  if (r.auth === 'agent') op['x-berth-agent-token'] = true;
  return op;
}

function operationId(r: RouteDoc): string {
  const words = r.path
    .replace(/^\/v1/, '')
    .split('/')
    .filter(Boolean)
    .map((w) => (w.startsWith(':') ? `by-${w.slice(1)}` : w));
  return [r.method, ...words].join('-').replace(/[^A-Za-z0-9]+([A-Za-z0-9])/g, (_m, c: string) => c.toUpperCase());
}

export interface OpenApiOptions {
  /** The package version, shown as info.version. */
  version: string;
}

/** Builds the document; cheap enough to build per request, and the server caches it. */
export function openApiDocument(opts: OpenApiOptions): Json {
  const paths: Record<string, Json> = {};
  for (const r of ROUTES) (paths[openApiPath(r.path)] ??= {})[r.method] = operation(r);
  const schemas: Json = {};
  for (const [name, s] of Object.entries(COMPONENTS)) schemas[name] = jsonSchema(s, 'output');
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'Berth',
      version: opts.version,
      description:
        'Isolated, persistent machines for AI-agent sessions, with a gate that authorizes every tool call. Everything under /v1 needs `Authorization: Bearer <token>` (the root key, a tenant API key, or, on the routes marked x-berth-agent-token, a session agent token). Errors are `{error: {code, message, details}}` with a string code; `details.field` names a bad input field.',
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    servers: [{ url: 'http://127.0.0.1:7070' }],
    tags: [...new Set(ROUTES.map((r) => r.tag))].map((name) => ({ name })),
    paths,
    components: {
      schemas,
      responses: {
        Error: {
          description: `An error. code is one of ${ERROR_CODES.join(', ')}; the status follows it (400 invalid_argument, 401 unauthenticated, 403 forbidden/policy_denied, 404 not_found, 409 invalid_state/conflict, 413 payload_too_large, 499 cancelled, 502 result_invalid, 503 unavailable/sandbox_failed, 504 timeout, 500 internal/config).`,
          content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
        },
      },
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
    },
  };
}
