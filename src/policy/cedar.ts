/**
 * The policy stage: a tenant's Cedar policy, parsed and validated once, evaluated per call.
 *
 * Compile (`PolicyEngine.compile`) parses the text, validates it in strict mode against the schema for the
 * tenant's tool set (cedar-schema.ts) and hands Cedar pre-parsed policy sets, one per tool, holding only the
 * policies whose action scope can match that tool. Per call, Cedar then parses only the request and the three
 * entities; it never re-parses policy text. Slicing by action scope is exact: a policy whose scope excludes
 * the action is neither satisfied nor erroring (the scope is checked before any condition), so it can never
 * be determining.
 *
 * Decisions: default deny, forbid wins (Cedar's semantics). Beyond Cedar's:
 * - a satisfied permit annotated `@approval("required")` makes the call need an operator's approval. When
 *   several permits are satisfied and any one of them demands approval, approval is required: a broad permit
 *   added later cannot quietly switch off the approval a narrower rule asks for.
 * - a forbid that fails to evaluate counts as matched (Cedar skips erroring policies, which for a forbid
 *   would fail open).
 * - `@reason("…")` on a forbid is quoted to the agent when the forbid refuses a call.
 *
 * Cedar's pre-parsed sets live in the wasm module's memory, keyed by a digest of (schema, policy text), and
 * there is no API to drop them: memory grows with the number of distinct policies compiled in the process
 * lifetime (a few KiB per rule per tool), not with calls. Compiling the same text twice reuses the entries.
 */
import {
  checkParsePolicySet,
  policySetTextToParts,
  policyToJson,
  preparsePolicySet,
  preparseSchema,
  statefulIsAuthorized,
  validate,
  type DetailedError,
  type EntityJson,
  type EntityUidJson,
  type PolicyJson,
  type CedarValueJson,
} from '@cedar-policy/cedar-wasm/nodejs';
import { InvalidArgumentError, canonicalJson, sha256Hex } from '../core/index.js';
import { BUILTIN_TOOLS } from './builtin-tools.js';
import { NET_CONNECT, NET_CONNECT_DEFINITION, argsProjection, cedarSchemaFor, type ArgsProjection } from './cedar-schema.js';
import type { Risk, ToolDefinition } from './types.js';

/** Longest policy text accepted, in characters. */
const MAX_POLICY_CHARS = 1 << 20;
const APPROVAL_VALUES: ReadonlySet<string> = new Set(['required']);

export interface PolicyInfo {
  /** `@id("…")` when given, else Cedar's positional id `policy<N>` (N counts from 0 in file order). */
  id: string;
  effect: 'permit' | 'forbid';
  annotations: Readonly<Record<string, string>>;
  /** Carries `@approval("required")`. */
  approval: boolean;
  /** 1-based line where the policy starts. */
  line: number;
}

export interface AuthorizeRequest {
  sessionId: string;
  tenantId: string;
  metadata: Readonly<Record<string, string>>;
  tool: string;
  risk: Risk;
  /** Canonical, schema-checked arguments; only the policy-visible ones reach Cedar. */
  args: Record<string, unknown>;
  /** Id of the plan step the call matches, when a plan is set and the call matches one. */
  planStep?: string;
  /** 0..23. */
  hourUtc: number;
  /** Calls the session made before this one. */
  callsInSession: number;
}

export interface AuthorizeResult {
  decision: 'allow' | 'deny';
  /** Allowed, and a determining permit carries @approval("required"). */
  approvalRequired: boolean;
  /** Determining policy ids: the satisfied permits on allow, the satisfied (or erroring) forbids on deny. */
  reasons: string[];
  /** Evaluation errors (policy id: message) and request errors; an error never turns a deny into an allow. */
  errors: string[];
  /** Policies that failed to evaluate for this request. */
  erroredPolicies: string[];
}

interface CompiledTool {
  risk: Risk;
  projection: ArgsProjection;
  psetId: string;
}

const preparsedSchemas = new Set<string>();
const preparsedSets = new Set<string>();

function uidOf(e: EntityUidJson): { type: string; id: string } {
  return '__entity' in e ? e.__entity : e;
}

/** Cedar's source offsets count UTF-8 bytes. */
function lineCol(text: string, byteOffset: number): { line: number; col: number } {
  const before = Buffer.from(text, 'utf8').subarray(0, byteOffset).toString('utf8');
  const lines = before.split('\n');
  return { line: lines.length, col: (lines[lines.length - 1]?.length ?? 0) + 1 };
}

function describe(err: DetailedError, text: string | null, rename: (s: string) => string): string {
  const loc = err.sourceLocations?.[0];
  let where = '';
  if (loc && text !== null) {
    const { line, col } = lineCol(text, loc.start);
    where = `line ${line}:${col}: `;
  }
  let msg = `${where}${rename(err.message)}`;
  if (loc?.label) msg += ` (${loc.label})`;
  if (err.help) msg += ` (help: ${err.help})`;
  return msg;
}

function actionScopeMatches(policy: PolicyJson, tool: ToolDefinition): boolean {
  const a = policy.action;
  const hits = (e: EntityUidJson): boolean => {
    const u = uidOf(e);
    return u.type === 'Action' && (u.id === tool.name || u.id === tool.risk);
  };
  if (a.op === 'All') return true;
  if (a.op === '==') {
    if (!('entity' in a)) return true; // a slot; templates are refused before this runs
    const u = uidOf(a.entity);
    return u.type === 'Action' && u.id === tool.name;
  }
  if ('entities' in a) return a.entities.some(hits);
  return hits(a.entity);
}

export class PolicyEngine {
  /** The text this engine was compiled from. */
  readonly policyText: string;
  /** SHA-256 of (schema, policy text): equal digests mean equal behaviour. */
  readonly digest: string;
  readonly policies: readonly PolicyInfo[];
  /** Validator warnings (the policy was accepted). */
  readonly warnings: readonly string[];
  private readonly byId: ReadonlyMap<string, PolicyInfo>;
  private readonly tools: ReadonlyMap<string, CompiledTool>;
  private readonly schemaName: string;

  private constructor(init: {
    policyText: string;
    digest: string;
    policies: PolicyInfo[];
    warnings: string[];
    tools: Map<string, CompiledTool>;
    schemaName: string;
  }) {
    this.policyText = init.policyText;
    this.digest = init.digest;
    this.policies = Object.freeze(init.policies.map((p) => Object.freeze(p)));
    this.warnings = Object.freeze(init.warnings);
    this.byId = new Map(this.policies.map((p) => [p.id, p]));
    this.tools = init.tools;
    this.schemaName = init.schemaName;
    Object.freeze(this);
  }

  /**
   * Parses and validates a policy against the Cedar schema of `tools` (default: the built-in tools; pass the
   * tenant's complete set, built-ins included). Throws InvalidArgumentError carrying Cedar's messages (with
   * line numbers) in `details.errors` when the text does not parse, does not validate, uses templates, or
   * misuses @id/@approval. Nothing changes on failure: the caller keeps its previous engine.
   */
  static compile(policyText: string, opts: { tools?: readonly ToolDefinition[] } = {}): PolicyEngine {
    const fail = (summary: string, errors: string[]): never => {
      throw new InvalidArgumentError(`${summary}: ${errors.join('; ')}`, { details: { errors } });
    };
    if (typeof policyText !== 'string') throw new InvalidArgumentError('policy text must be a string');
    if (policyText.length > MAX_POLICY_CHARS) fail('policy rejected', [`the policy is longer than ${MAX_POLICY_CHARS} characters`]);
    const tools = opts.tools ?? BUILTIN_TOOLS;
    const schema = cedarSchemaFor(tools);
    const schemaDigest = sha256Hex(canonicalJson(schema));
    const digest = sha256Hex(`${schemaDigest}\n${policyText}`);
    const noRename = (s: string): string => s;

    const parsed = checkParsePolicySet({ staticPolicies: policyText });
    if (parsed.type === 'failure') fail('policy does not parse', parsed.errors.map((e) => describe(e, policyText, noRename)));

    const parts = policySetTextToParts(policyText);
    if (parts.type === 'failure') return fail('policy does not parse', parts.errors.map((e) => describe(e, policyText, noRename)));
    if (parts.policy_templates.length > 0) fail('policy rejected', ['templates (policies with ?principal or ?resource slots) are not supported']);

    // policySetTextToParts returns the policies sorted by Cedar's positional id as a string
    // (policy0, policy1, policy10, policy11, policy2 …); rebuild that order to learn each one's id.
    const cedarIds = parts.policies.map((_, i) => `policy${i}`).sort();
    const ordered = parts.policies.map((text, k) => ({ text, cedarId: cedarIds[k] as string }));
    ordered.sort((a, b) => Number(a.cedarId.slice('policy'.length)) - Number(b.cedarId.slice('policy'.length)));
    const policies: PolicyInfo[] = [];
    const jsonById = new Map<string, PolicyJson>();
    const textById = new Map<string, string>();
    const renameMap = new Map<string, string>();
    const errors: string[] = [];
    let searchFrom = 0;
    for (const { text, cedarId } of ordered) {
      const j = policyToJson(text);
      if (j.type === 'failure') {
        errors.push(...j.errors.map((e) => describe(e, null, noRename)));
        continue;
      }
      const annotations = { ...(j.json.annotations ?? {}) };
      const id = annotations.id ?? cedarId;
      const at = policyText.indexOf(text, searchFrom);
      if (at >= 0) searchFrom = at + text.length;
      const line = at >= 0 ? policyText.slice(0, at).split('\n').length : 0;
      if (id === '') errors.push(`line ${line}: @id must not be empty`);
      if (jsonById.has(id)) errors.push(`line ${line}: @id ${JSON.stringify(id)} is used by two policies`);
      const approval = annotations.approval;
      if (approval !== undefined) {
        if (!APPROVAL_VALUES.has(approval)) errors.push(`policy ${JSON.stringify(id)} (line ${line}): @approval must be "required", not ${JSON.stringify(approval)}`);
        if (j.json.effect === 'forbid') errors.push(`policy ${JSON.stringify(id)} (line ${line}): @approval has no meaning on a forbid`);
      }
      renameMap.set(cedarId, id);
      jsonById.set(id, j.json);
      textById.set(id, text);
      policies.push({ id, effect: j.json.effect, annotations, approval: approval === 'required', line });
    }
    if (errors.length > 0) fail('policy rejected', errors);

    const rename = (s: string): string => s.replace(/`(policy\d+)`/g, (m, cid: string) => {
      const id = renameMap.get(cid);
      return id === undefined ? m : `\`${id}\``;
    });
    const v = validate({ schema, policies: { staticPolicies: policyText }, validationSettings: { mode: 'strict' } });
    if (v.type === 'failure') fail('policy does not validate', v.errors.map((e) => describe(e, policyText, rename)));
    if (v.type === 'success' && v.validationErrors.length > 0) {
      fail(
        'policy does not validate against the Berth schema',
        v.validationErrors.map((e) => describe(e.error, policyText, rename)),
      );
    }
    const warnings =
      v.type === 'success'
        ? [...v.validationWarnings.map((w) => describe(w.error, policyText, rename)), ...v.otherWarnings.map((w) => describe(w, null, rename))]
        : [];

    const schemaName = `berth-schema:${schemaDigest}`;
    if (!preparsedSchemas.has(schemaName)) {
      const r = preparseSchema(schemaName, schema);
      if (r.type === 'failure') throw new InvalidArgumentError(`the Cedar schema for these tools is invalid: ${r.errors.map((e) => e.message).join('; ')}`);
      preparsedSchemas.add(schemaName);
    }
    const compiled = new Map<string, CompiledTool>();
    for (const tool of [...tools, NET_CONNECT_DEFINITION]) {
      const slice: Record<string, string> = {};
      for (const p of policies) {
        if (actionScopeMatches(jsonById.get(p.id) as PolicyJson, tool)) slice[p.id] = textById.get(p.id) as string;
      }
      const psetId = `berth-policy:${digest}:${tool.name}`;
      if (!preparsedSets.has(psetId)) {
        const r = preparsePolicySet(psetId, { staticPolicies: slice });
        if (r.type === 'failure') fail('policy rejected', r.errors.map((e) => describe(e, null, noRename)));
        preparsedSets.add(psetId);
      }
      compiled.set(tool.name, { risk: tool.risk, projection: argsProjection(tool), psetId });
    }
    return new PolicyEngine({ policyText, digest, policies, warnings, tools: compiled, schemaName });
  }

  policy(id: string): PolicyInfo | undefined {
    return this.byId.get(id);
  }

  /** Whether the tool was part of the tool set this engine was compiled for. */
  hasTool(name: string): boolean {
    return this.tools.has(name);
  }

  authorize(req: AuthorizeRequest): AuthorizeResult {
    const denied = (errors: string[], reasons: string[] = [], erroredPolicies: string[] = []): AuthorizeResult => ({
      decision: 'deny',
      approvalRequired: false,
      reasons,
      errors,
      erroredPolicies,
    });
    const t = this.tools.get(req.tool);
    if (!t) return denied([`tool ${req.tool} is not in the tool set this policy was compiled for; the policy must be applied again`]);
    if (t.risk !== req.risk) return denied([`tool ${req.tool} changed risk (${t.risk} → ${req.risk}) since this policy was compiled; the policy must be applied again`]);
    let args: Record<string, CedarValueJson>;
    try {
      args = t.projection.project(req.args);
    } catch (e) {
      return denied([(e as Error).message]);
    }
    const context: Record<string, CedarValueJson> = {
      args,
      risk: req.risk,
      hourUtc: req.hourUtc,
      callsInSession: req.callsInSession,
    };
    if (req.planStep !== undefined) context.planStep = req.planStep;
    // net.connect shows its destination at the top of the context as well (context.host, context.port).
    if (req.tool === NET_CONNECT) Object.assign(context, args);
    const principal = { type: 'Session', id: req.sessionId };
    const metadataUid = { type: 'Metadata', id: req.sessionId };
    const resource = { type: 'Tool', id: req.tool };
    const entities: EntityJson[] = [
      { uid: principal, attrs: { tenant: req.tenantId, metadata: { __entity: metadataUid } }, parents: [] },
      { uid: metadataUid, attrs: {}, parents: [], tags: { ...req.metadata } },
      { uid: resource, attrs: {}, parents: [] },
    ];
    let answer: ReturnType<typeof statefulIsAuthorized>;
    try {
      answer = statefulIsAuthorized({
        principal,
        action: { type: 'Action', id: req.tool },
        resource,
        context,
        entities,
        preparsedPolicySetId: t.psetId,
        preparsedSchemaName: this.schemaName,
        validateRequest: true,
      });
    } catch (e) {
      return denied([`policy evaluation failed: ${(e as Error).message}`]);
    }
    if (answer.type === 'failure') return denied(answer.errors.map((e) => e.message));
    const { decision, diagnostics } = answer.response;
    const errors = diagnostics.errors.map((e) => `${e.policyId}: ${e.error.message}`);
    const errored = diagnostics.errors.map((e) => e.policyId);
    const failedForbids = errored.filter((id) => this.byId.get(id)?.effect === 'forbid');
    if (failedForbids.length > 0) {
      const forbids = [...new Set([...diagnostics.reason, ...failedForbids])].filter((id) => this.byId.get(id)?.effect === 'forbid');
      return denied(errors, forbids, errored);
    }
    if (decision === 'deny') return denied(errors, diagnostics.reason, errored);
    const approvalRequired = diagnostics.reason.some((id) => this.byId.get(id)?.approval === true);
    return { decision: 'allow', approvalRequired, reasons: diagnostics.reason, errors, erroredPolicies: errored };
  }
}
