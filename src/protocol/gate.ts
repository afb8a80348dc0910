/**
 * Wire types and request schemas of the tool gate: tools, calls, approvals, policy, plans, gate settings.
 * These names are a public contract (CLI --json output is built from them): add fields, never rename.
 */
import * as z from 'zod';
import { APPROVAL_STATUSES, type ApprovalRecord, type ApprovalStatus } from '../core/records.js';
import type { CallResult, GateStage, ToolView } from '../core/tools.js';
import { iso } from './views.js';

/** Wire names for the gate's shared types (src/core/tools.ts). */
export type { ToolView } from '../core/tools.js';
export type GateStageName = GateStage;

export interface ToolListView {
  tools: ToolView[];
}

/** The answer to a tool call (HTTP 200 for all three). */
export type CallResultView = CallResult;

/** POST /v1/sessions/:id/tools/:name/call. */
export interface CallBody {
  /** The tool's arguments (a JSON object); default {}. */
  args?: unknown;
  /** The plan step this call claims to be. */
  step?: string;
}

/** POST /v1/sessions/:id/calls. */
export interface CallsBody extends CallBody {
  tool: string;
}

export interface ApprovalView {
  approvalId: string;
  id: string;
  tenantId: string;
  sessionId: string;
  tool: string;
  /** Exactly the arguments that run if approved. */
  args: Record<string, unknown>;
  argsDigest: string;
  step: string | null;
  status: ApprovalStatus;
  policyIds: string[];
  requestedBy: string;
  createdAt: string;
  expiresAt: string | null;
  decidedBy: string | null;
  decidedAt: string | null;
  reason: string | null;
  usedAt: string | null;
  /** The call's answer once it ran (or was refused for good). */
  result: CallResultView | null;
  /** computer calls: where the screen kept when the call was parked is (PNG, its point marked; 404 when none was kept). */
  screenshotUrl: string | null;
}

export interface ApprovalListView {
  approvals: ApprovalView[];
}

export interface DenyBody {
  reason: string;
}

export interface PolicyView {
  tenantId: string;
  text: string;
  /** 0 = the default policy (never set). */
  version: number;
  isDefault: boolean;
  updatedAt: string | null;
  updatedBy: string | null;
  digest: string;
  warnings: string[];
}

/** PUT /v1/policy with a JSON body (a text/plain body is the policy itself). */
export interface PolicyBody {
  policy: string;
}

export interface ToolDefinitionView {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown>;
  risk: 'read' | 'write' | 'irreversible';
  executor: Record<string, unknown>;
  pathArgs?: string[];
  opaqueArgs?: string[];
  imageResults?: string[];
  builtin: boolean;
  updatedAt: string | null;
  updatedBy: string | null;
}

export interface ToolDefinitionListView {
  tools: ToolDefinitionView[];
}

/** PUT /v1/sessions/:id/tools. */
export interface InstallToolsBody {
  tools: string[];
}

/** PUT /v1/sessions/:id/gate: fields left out keep their value. */
export interface GateSettingsBody {
  breaker?: {
    /** Identical failing calls in a row that trip the breaker; default 10. */
    failures?: number;
    /** Calls in any 60 s beyond which it trips; default 120. */
    perMinute?: number;
  };
  /**
   * The session's egress allow-list, for its proxy and http.request: `host` and `*.domain` (ports 80 and
   * 443), `host:port`, an IP, a CIDR. Replaces the list. Default none.
   */
  egressAllow?: string[];
  /** Older name of egressAllow (give one of the two). */
  httpAllow?: string[];
  /** Loopback, private, link-local and metadata ranges the session may reach anyway, as CIDRs. Default none. */
  egressAllowCidr?: string[];
  /** Seconds an approval waits for a decision; 0 = forever. Default 3600. */
  approvalTtlS?: number;
}

export interface GateView {
  sessionId: string;
  tenantId: string;
  tools: string[];
  /** The egress allow-list. */
  egressAllow: string[];
  /** The same list under its older name. */
  httpAllow: string[];
  egressAllowCidr: string[];
  approvalTtlS: number;
  breaker: {
    failures: number;
    perMinute: number;
    open: boolean;
    trip: string | null;
    reason: string | null;
    openedAt: string | null;
    streakFailures: number;
  };
  pausedByBreaker: boolean;
  calls: number;
}

export interface PlanView {
  sessionId: string;
  plan: { objective: string; steps: Array<{ id: string; tool: string; arguments: Record<string, unknown>; repeatable?: boolean }> } | null;
  state: { cursor: number; consumed: Record<string, number> } | null;
  setAt: string | null;
  setBy: string | null;
}

// ---- schemas ----

const ToolName = z.string().min(1).max(128);
const StepId = z.string().min(1).max(128);

export const CallBodySchema = z.strictObject({ args: z.unknown().optional(), step: StepId.optional() });
export const CallsBodySchema = z.strictObject({ tool: ToolName, args: z.unknown().optional(), step: StepId.optional() });
export const DenyBodySchema = z.strictObject({ reason: z.string().min(1).max(4096) });
export const PolicyBodySchema = z.strictObject({ policy: z.string().min(1).max(1 << 20) });
export const InstallToolsBodySchema = z.strictObject({ tools: z.array(ToolName).max(1000) });
export const GateSettingsBodySchema = z.strictObject({
  breaker: z
    .strictObject({
      failures: z.number().int().min(1).max(1_000_000).optional(),
      perMinute: z.number().int().min(1).max(100_000).optional(),
    })
    .optional(),
  egressAllow: z.array(z.string().min(1).max(300)).max(256).optional(),
  httpAllow: z.array(z.string().min(1).max(300)).max(256).optional(),
  egressAllowCidr: z.array(z.string().min(1).max(64)).max(256).optional(),
  approvalTtlS: z.number().int().min(0).max(30 * 86_400).optional(),
});

export const ApprovalStatusSchema = z.enum(APPROVAL_STATUSES);
export const ApprovalsQuerySchema = z.object({
  /** Comma-separated statuses, e.g. "pending" or "approved,used". */
  state: z
    .string()
    .transform((s) => s.split(',').filter((x) => x !== ''))
    .pipe(z.array(ApprovalStatusSchema))
    .optional(),
  sessionId: z.string().min(1).max(64).optional(),
});
/** Root names the tenant a tenant-scoped call acts on. */
export const TenantQuerySchema = z.object({ tenantId: z.string().min(1).max(64).optional() });

// ---- views ----

const isoOrNull = (ms: number | null) => (ms === null ? null : iso(ms));

export function toApprovalView(a: ApprovalRecord): ApprovalView {
  return {
    approvalId: a.id,
    id: a.id,
    tenantId: a.tenantId,
    sessionId: a.sessionId,
    tool: a.tool,
    args: a.args,
    argsDigest: a.argsDigest,
    step: a.step,
    status: a.status,
    policyIds: [...a.policyIds],
    requestedBy: a.requestedBy,
    createdAt: iso(a.createdAt),
    expiresAt: isoOrNull(a.expiresAt),
    decidedBy: a.decidedBy,
    decidedAt: isoOrNull(a.decidedAt),
    reason: a.reason,
    usedAt: isoOrNull(a.usedAt),
    result: a.result as CallResultView | null,
    screenshotUrl: a.tool === 'computer' ? `/v1/approvals/${a.id}/screenshot` : null,
  };
}

export { isoOrNull };
