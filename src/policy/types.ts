/**
 * Types of the gate. Everything here is plain data (JSON-serialisable) so the engine can persist plan,
 * breaker and approval state and write verdicts to the audit log as they are.
 *
 * Times are milliseconds since the epoch throughout; no function in src/policy reads the clock.
 */

/** How much damage a tool can do. Decides the Cedar action group (`Action::"read"` …) a tool belongs to. */
export const RISKS = ['read', 'write', 'irreversible'] as const;
export type Risk = (typeof RISKS)[number];

export type { JsonSchema } from '../core/index.js';
import type { JsonSchema } from '../core/index.js';

export type BuiltinToolName = 'shell.exec' | 'fs.read' | 'fs.write' | 'fs.list' | 'http.request' | 'computer';

export type ToolExecutor =
  | { kind: 'builtin'; name: BuiltinToolName }
  /** Operator tool: argv runs inside the sandbox with the arguments as JSON on stdin; stdout is the JSON result. */
  | { kind: 'command'; argv: string[]; /** Milliseconds; absent = no limit. */ timeoutMs?: number };

export interface ToolDefinition {
  /** Dotted lower-case name, e.g. `shell.exec`; also the Cedar action and resource id. */
  name: string;
  /** For the agent: what the tool does. */
  description: string;
  /** Schema of the arguments; its top level must be `type: "object"`. */
  inputSchema: JsonSchema;
  /** Schema of the result the executor returns; a result that fails it never reaches the agent. */
  outputSchema: JsonSchema;
  risk: Risk;
  executor: ToolExecutor;
  /**
   * Top-level arguments that are paths inside the sandbox. The engine canonicalizes them (symlinks followed)
   * before evaluate(); evaluate refuses a call whose path arguments are not canonical. Default: none.
   */
  pathArgs?: readonly string[];
  /**
   * Top-level arguments the executor gets but Cedar does not see (bulk data such as file content or a request
   * body: shipping it into the policy engine on every call costs time and no policy can reason about it).
   * Default: none.
   */
  opaqueArgs?: readonly string[];
  /**
   * Top-level result fields that are images ({mimeType: 'image/png', data: base64, width, height}): the
   * result stage checks each is a PNG of the declared size, and MCP returns them as image content.
   * Default: none.
   */
  imageResults?: readonly string[];
}

/**
 * The stages, in the order the issue names them; evaluate() reports verdicts in this order. `control` comes
 * first: while a person holds the session's control lease, nothing else about an agent's call matters yet.
 */
export const STAGES = ['control', 'arguments', 'policy', 'plan', 'approval', 'breaker', 'result'] as const;
export type Stage = (typeof STAGES)[number];

/** Stable codes of a refusal. Agents and tests branch on these, never on reason text. */
export const DENY_CODES = [
  'unknown_tool', // arguments: no such tool
  'invalid_arguments', // arguments: the input schema refused them, or a path was not canonicalized
  'policy_denied', // policy: a forbid matched, no permit matched, or the policy could not be evaluated
  'off_plan', // plan: a plan is set and the call matches none of its next steps
  'approval_denied', // approval: an operator refused this call
  'approval_expired', // approval: nobody decided (or the call did not run) before the approval expired
  'breaker_open', // breaker: the session's breaker is tripped until an operator resets it
  'result_invalid', // result: the executor's output failed the tool's output schema, or was truncated
  'human_control', // control: a person holds the session's control lease; retryable, the agent waits and calls again
] as const;
export type DenyCode = (typeof DENY_CODES)[number];

export interface AllowDecision {
  effect: 'allow';
  /** The arguments that were checked; the engine must run exactly these. */
  args: Record<string, unknown>;
  /** SHA-256 of the canonical {tool, args}; the breaker's call key. */
  argsDigest: string;
  /** The plan step the call consumes, when a plan is set. */
  planStepId?: string;
  /** The approval this call spends; the engine marks it used before running the call. */
  approvalId?: string;
}

export interface DenyDecision {
  effect: 'deny';
  stage: Stage;
  code: DenyCode;
  /** Written for the agent: what was refused, why, and what it can do instead. */
  reason: string;
  /** The same call may succeed later unchanged (human_control). Absent = false. */
  retryable?: true;
}

export interface AskDecision {
  effect: 'ask';
  /** SHA-256 of the canonical {tool, args}: the approval binds exactly these arguments. */
  argsDigest: string;
  /** The checked arguments the operator is asked about (store them with the approval). */
  args: Record<string, unknown>;
  /** The permit policies that demanded approval. */
  policyIds: string[];
  /** Set when the caller passed a still-pending approval for this exact call: keep waiting on it. */
  approvalId?: string;
  reason: string;
}

export type Decision = AllowDecision | DenyDecision | AskDecision;

/** One line of the audit trail per stage that ran. */
export interface StageVerdict {
  stage: Stage;
  /** pass: the stage let the call through; skip: the stage did not apply (no plan, no approval needed). */
  verdict: 'pass' | 'deny' | 'ask' | 'skip';
  code?: DenyCode;
  /** Short human-readable account for operators. */
  detail: string;
  /** Structured facts for audit queries (policy ids, step id, approval id …). */
  data?: Record<string, unknown>;
}

// ---- plan and breaker: persisted state, typed in src/core ----------------------------------------------

export type { BreakerSettings, BreakerState, BreakerTrip, Plan, PlanState, PlanStep } from '../core/index.js';

// ---- approval ------------------------------------------------------------------------------------------

/** What the gate needs to know about an approval; the engine's approval record has at least these fields. */
export interface ApprovalRecordLike {
  id: string;
  tool: string;
  /** argsDigest(tool, args) of the parked call. */
  argsDigest: string;
  status: 'pending' | 'approved' | 'denied';
  /** ms; after it the approval can neither be decided nor used (timeout counts as deny). null = never. */
  expiresAt: number | null;
  /** Who decided (operator id), null while pending. */
  decidedBy: string | null;
  decidedAt: number | null;
  /** When the approved call ran; an approval runs exactly once. */
  usedAt: number | null;
}

// ---- control lease -------------------------------------------------------------------------------------

/** A person's exclusive control lease on a session (the console's "Take control"). */
export interface ControlLease {
  /** Who holds it, as stored in records (`operator:ten_…`), with the console session when taken there. */
  holder: string;
  /** ms: when it was taken. */
  since: number;
  /** ms: it lapses at this time unless the holder acts again (inactivity timeout). */
  expiresAt: number;
}
