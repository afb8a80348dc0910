/**
 * The gate: evaluate() decides whether one tool call may run. It is pure and synchronous: no I/O, no clock
 * (`now` is passed in), no mutation of its input; persisted state comes back as values (planNext,
 * breakerNext) for the engine to store.
 *
 * Every verdict on a call is made here; the engine only gathers facts (resolved paths, the approval held,
 * the allow-list) and never builds a verdict itself.
 *
 * Stage order (verdicts are reported in this order, and the first refusal ends evaluation):
 *   0. control    while a person holds the session's control lease, an agent's call is refused (human_control,
 *                 retryable); no other stage runs and the breaker does not count it.
 *   0. breaker    an already open breaker refuses first, with no other stage run (the engine does not even
 *                 resolve paths in the sandbox then: a paused machine cannot).
 *   1. arguments  the tool exists; the arguments satisfy its input schema; every path argument could be
 *                 resolved in the sandbox and is canonical (see args.ts); a call run on an operator's
 *                 approval still has the approved arguments (a path may point elsewhere by now).
 *   2. policy     http.request only to the session's allow-listed hosts (egress.ts); then the tenant's Cedar
 *                 policy (cedar.ts). Cedar needs the plan step the call matches, so the plan match is
 *                 *computed* before Cedar runs and *reported* as stage 3.
 *   3. plan       while a plan is set, the call must be its next step (plan.ts), and the step it claims to be
 *                 when it names one.
 *   4. approval   when a permit demanded approval: a matching, decided, unexpired, unused approval lets the
 *                 call through; otherwise the call is parked (ask) or refused.
 *   5. breaker    last, right before execution: an open breaker refuses the call. The call is counted towards
 *                 the rate limit whatever the outcome (breakerNext), so a loop of refused calls trips too.
 *   (executor)
 *   6. result     checkResult(): the output must satisfy the tool's output schema.
 *
 * What the engine does around it, per call (under the session lock):
 *   prepareArgs → canonicalize paths in the sandbox → withCanonicalPaths → evaluate →
 *   persist breakerNext; append one audit entry per verdict →
 *   allow: persist planNext, mark decision.approvalId used, run decision.args, checkResult, persist its
 *          breakerNext, audit the result verdict;
 *   ask:   store an approval {argsDigest, args, expiresAt} (or keep waiting on decision.approvalId), answer
 *          {"decision":"pending"}; when an operator decides, evaluate again with the approval;
 *   deny:  answer {"decision":"deny", stage, code, reason}.
 *
 * Breaker outcomes: evaluate records a refusal at stages 1–4 as a failure of that call (an agent retrying a
 * refused call in a loop trips the breaker); checkResult records the executed call's outcome.
 */
import { InvalidStateError, pngInfo, sha256Hex, type DesktopSettings } from '../core/index.js';
import { computerArgProblem } from './computer-tool.js';
import { argsDigest, checkApproval } from './approval.js';
import { isCanonicalPath } from './args.js';
import { checkBreaker, recordCall, recordOutcome } from './breaker.js';
import type { AuthorizeResult, PolicyEngine } from './cedar.js';
import { checkHost } from './egress.js';
import { matchPlan, type PlanMatch } from './plan.js';
import { validateArgs, validateResult } from './schema.js';
import type {
  ApprovalRecordLike,
  BreakerSettings,
  ControlLease,
  BreakerState,
  Decision,
  DenyCode,
  DenyDecision,
  Plan,
  PlanState,
  Stage,
  StageVerdict,
  ToolDefinition,
} from './types.js';

export interface SessionFacts {
  id: string;
  tenantId: string;
  metadata: Readonly<Record<string, string>>;
  /** Tool calls the session made before this one. */
  callsInSession: number;
}

export interface EvaluateInput {
  /** The tool name the agent asked for. */
  toolName: string;
  /** Its definition, or undefined when the session has no such tool. */
  tool: ToolDefinition | undefined;
  /** The arguments with path arguments already canonicalized (withCanonicalPaths). */
  args: unknown;
  session: SessionFacts;
  policy: PolicyEngine;
  plan?: { plan: Plan; state: PlanState } | null;
  breaker: { state: BreakerState; settings: BreakerSettings };
  /** The approval the caller holds for this call, if any (looked up by id or by argsDigest). */
  approval?: ApprovalRecordLike | null;
  /** ms since the epoch. */
  now: number;
  /** Tool names offered to the agent, quoted when it asks for one that does not exist. */
  availableTools?: readonly string[];
  /** Path arguments the engine could not resolve in the sandbox (args then holds them as the agent wrote them). */
  unresolvedPaths?: readonly UnresolvedPath[];
  /** Hosts http.request may reach (`host`, `host:port`, `*.domain`). Default none: every request is refused. */
  httpAllow?: readonly string[];
  /** The plan step the agent says this call is; refused when the plan matches it to another step. */
  claimedStep?: string;
  /**
   * The call runs on `approval` because an operator approved it (not because the agent repeated it): arguments
   * that no longer have the approved digest are refused rather than parked for a new approval.
   */
  runsOnApproval?: boolean;
  /** The session's control lease, if someone took it (expired leases may be passed: evaluate ignores them). */
  control?: ControlLease | null;
  /**
   * Who makes the call. A control lease stops agents only: an operator's own calls (and an approved call an
   * operator runs) are the human acting. Default 'agent'.
   */
  caller?: 'agent' | 'operator';
  /** The session's desktop screen (the `computer` tool checks its points against it); null: no desktop. */
  screen?: DesktopSettings | null;
}

export interface UnresolvedPath {
  /** The argument's name. */
  arg: string;
  /** The path as the agent gave it. */
  path: string;
  /** Why the sandbox could not resolve it: the error's code and message. */
  code: string;
  message: string;
}

export interface Evaluation {
  decision: Decision;
  verdicts: StageVerdict[];
  /** argsDigest(toolName, args); null when the arguments are not JSON. */
  argsDigest: string | null;
  /** The plan state after this call; persist it only when the decision is allow. */
  planNext?: PlanState;
  /** The breaker state after counting this call; persist it whatever the decision. */
  breakerNext: BreakerState;
}

const MS_PER_HOUR = 3_600_000;

function quote(s: string, max = 120): string {
  return JSON.stringify(s.length > max ? `${s.slice(0, max)}…` : s);
}

/** `fs.write of "/etc/passwd"`, `shell.exec "rm -rf /"`, `http.request POST "https://…"`: the subject of a reason. */
export function describeCall(tool: string, args: unknown): string {
  if (typeof args !== 'object' || args === null) return tool;
  const a = args as Record<string, unknown>;
  if (typeof a.command === 'string') return `${tool} ${quote(a.command)}`;
  if (typeof a.method === 'string' && typeof a.url === 'string') return `${tool} ${a.method} ${quote(a.url)}`;
  if (typeof a.path === 'string') return `${tool} of ${quote(a.path)}`;
  return tool;
}

function policyDenyReason(subject: string, tool: ToolDefinition, res: AuthorizeResult, engine: PolicyEngine): string {
  if (res.reasons.length === 0 && res.errors.length > 0) {
    return `${subject} could not be checked against the policy (${res.errors.join('; ')}), so it was not run; this is a configuration problem for the operator`;
  }
  const errored = new Set(res.erroredPolicies);
  const parts = res.reasons.map((id) => {
    const p = engine.policy(id);
    if (errored.has(id)) return `policy ${quote(id)} could not be evaluated for this call and refuses it to be safe`;
    const why = p?.annotations.reason;
    return `it is forbidden by policy ${quote(id)}${why ? `: ${why}` : ''}`;
  });
  if (parts.length > 0) return `${subject} was not run: ${parts.join('; ')}`;
  return (
    `${subject} was not run: no policy permits ${tool.name} (risk ${tool.risk}) for this session, and calls are refused unless a ` +
    'policy permits them. Use another tool or ask the operator'
  );
}

/** Whether `lease` stops a call by `caller` at `now`: held, unexpired, and the caller is an agent. */
export function controlHeld(lease: ControlLease | null | undefined, caller: 'agent' | 'operator', now: number): lease is ControlLease {
  return !!lease && caller === 'agent' && now < lease.expiresAt;
}

/** Runs stages 0–5 for one call. Throws only on engine bugs (inconsistent input), never for a refusal. */
export function evaluate(input: EvaluateInput): Evaluation {
  const { toolName, tool, args, session, policy, now } = input;
  const { settings } = input.breaker;
  if (tool && tool.name !== toolName) throw new InvalidStateError(`tool definition ${tool.name} passed for a call to ${toolName}`);
  if (input.runsOnApproval && !input.approval) throw new InvalidStateError('runsOnApproval without the approval it runs on');
  const verdicts: StageVerdict[] = [];

  const counted = recordCall(input.breaker.state, settings, now);
  let digest: string | null = null;
  try {
    digest = argsDigest(toolName, args);
  } catch {
    digest = null;
  }

  // 0. control: a person holds the session. Refused before anything else and not counted by the breaker (an
  // agent politely retrying while it waits must not trip it); the call was never looked at, so it may be
  // repeated unchanged.
  if (controlHeld(input.control, input.caller ?? 'agent', now)) {
    const lease = input.control;
    const waitS = Math.max(1, Math.ceil((lease.expiresAt - now) / 1000));
    return {
      decision: {
        effect: 'deny',
        stage: 'control',
        code: 'human_control',
        reason:
          `a person (${lease.holder}) has taken control of this session since ${new Date(lease.since).toISOString()}, so ${describeCall(toolName, args)} was not run. ` +
          `Wait and call again later, unchanged: the call runs once they hand control back (at the latest when their lease lapses, in ${waitS} s without activity). Do not work around it`,
        retryable: true,
      },
      verdicts: [{ stage: 'control', verdict: 'deny', code: 'human_control', detail: `control held by ${lease.holder}`, data: { holder: lease.holder, since: lease.since } }],
      argsDigest: digest,
      breakerNext: input.breaker.state,
    };
  }
  const deny = (stage: Stage, code: DenyCode, reason: string, detail: string, data?: Record<string, unknown>): Evaluation => {
    verdicts.push({ stage, verdict: 'deny', code, detail, ...(data ? { data } : {}) });
    const decision: DenyDecision = { effect: 'deny', stage, code, reason };
    const breakerNext =
      stage === 'breaker' ? counted : recordOutcome(counted, settings, { callKey: digest ?? `${toolName}:unencodable`, tool: toolName, failed: true }, now);
    return { decision, verdicts, argsDigest: digest, breakerNext };
  };

  // 0. an open breaker: nothing else is looked at
  if (input.breaker.state.open) {
    const why = input.breaker.state.reason ?? 'tripped';
    return deny(
      'breaker',
      'breaker_open',
      `the circuit breaker of this session is open (${why}), so no tool call runs until an operator resets it; stop and report what you were doing`,
      `breaker open: ${why}`,
      { openedAt: input.breaker.state.openedAt },
    );
  }

  // 1. arguments
  if (!tool) {
    const offer = input.availableTools?.length ? `; available tools: ${input.availableTools.join(', ')}` : '';
    return deny('arguments', 'unknown_tool', `there is no tool named ${quote(toolName)}${offer}`, 'unknown tool', { tool: toolName });
  }
  const v = validateArgs(tool, args);
  if (!v.ok) {
    return deny(
      'arguments',
      'invalid_arguments',
      `the arguments for ${tool.name} are invalid, so it was not run: ${v.errors.join('; ')}. Fix them and call again`,
      'input schema refused the arguments',
      { errors: v.errors },
    );
  }
  const a = args as Record<string, unknown>;
  const unresolved = input.unresolvedPaths?.[0];
  if (unresolved) {
    return deny(
      'arguments',
      'invalid_arguments',
      `the ${unresolved.arg} argument of ${tool.name} (${quote(unresolved.path)}) cannot be resolved inside the sandbox (${unresolved.message}), so the call was not run`,
      'path argument cannot be resolved',
      { argument: unresolved.arg, error: unresolved.code },
    );
  }
  if (tool.executor.kind === 'builtin' && tool.executor.name === 'computer') {
    const problem = computerArgProblem(a, input.screen ?? null);
    if (problem) {
      return deny('arguments', 'invalid_arguments', `the arguments for computer are invalid, so it was not run: ${problem}. Fix them and call again`, problem, { argument: 'computer' });
    }
  }
  for (const p of tool.pathArgs ?? []) {
    const val = a[p];
    if (typeof val === 'string' && !isCanonicalPath(val)) {
      return deny(
        'arguments',
        'invalid_arguments',
        `the ${p} argument of ${tool.name} (${quote(val)}) could not be resolved to a canonical path, so the call was not run`,
        'path argument not canonicalized by the engine',
        { argument: p },
      );
    }
  }
  if (digest === null) {
    return deny('arguments', 'invalid_arguments', `the arguments for ${tool.name} are not plain JSON`, 'arguments not encodable');
  }
  const subject = describeCall(tool.name, a);
  if (input.runsOnApproval && input.approval && input.approval.argsDigest !== digest) {
    return deny(
      'arguments',
      'invalid_arguments',
      `${subject} no longer resolves to the arguments that were approved (a path now points elsewhere), so the approved call was not run; call again to ask for a new approval`,
      'arguments changed since approval',
      { approvalId: input.approval.id },
    );
  }
  verdicts.push({ stage: 'arguments', verdict: 'pass', detail: 'arguments valid', data: { argsDigest: digest } });

  // Plan match first: Cedar sees context.planStep. Reported as stage 3 below.
  const plan = input.plan ?? null;
  const match: PlanMatch | null = plan ? matchPlan(plan.plan, plan.state, tool.name, a) : null;

  // 2. policy: egress first, then Cedar
  if (tool.executor.kind === 'builtin' && tool.executor.name === 'http.request') {
    const hc = checkHost(a.url as string, input.httpAllow ?? []);
    if (!hc.ok) return deny('policy', 'policy_denied', `${subject} was not run: ${hc.reason}`, 'host not on the http allow-list', { host: hc.host });
  }
  const res = policy.authorize({
    sessionId: session.id,
    tenantId: session.tenantId,
    metadata: session.metadata,
    tool: tool.name,
    risk: tool.risk,
    args: a,
    ...(match?.ok ? { planStep: match.stepId } : {}),
    hourUtc: Math.floor(now / MS_PER_HOUR) % 24,
    callsInSession: session.callsInSession,
  });
  if (res.decision === 'deny') {
    return deny('policy', 'policy_denied', policyDenyReason(subject, tool, res, policy), res.reasons.length ? 'forbidden by policy' : 'no permit matched', {
      policyIds: res.reasons,
      ...(res.errors.length ? { errors: res.errors } : {}),
    });
  }
  verdicts.push({
    stage: 'policy',
    verdict: 'pass',
    detail: res.approvalRequired ? 'permitted, approval required' : 'permitted',
    data: { policyIds: res.reasons, approvalRequired: res.approvalRequired, ...(res.errors.length ? { errors: res.errors } : {}) },
  });

  // 3. plan
  if (!match) {
    verdicts.push({ stage: 'plan', verdict: 'skip', detail: 'no plan set' });
  } else if (!match.ok) {
    return deny('plan', 'off_plan', match.reason, 'call matches no next step of the plan', { expected: match.expected });
  } else if (input.claimedStep !== undefined && input.claimedStep !== match.stepId) {
    return deny(
      'plan',
      'off_plan',
      `this ${tool.name} call is step ${quote(match.stepId)} of the plan, not ${quote(input.claimedStep)} as claimed, so it was not run`,
      'call is not the step it claims',
      { claimed: input.claimedStep, matched: match.stepId },
    );
  } else {
    verdicts.push({ stage: 'plan', verdict: 'pass', detail: `matches step ${match.stepId}`, data: { stepId: match.stepId } });
  }

  // 4. approval
  let approvalId: string | undefined;
  if (!res.approvalRequired) {
    verdicts.push({ stage: 'approval', verdict: 'skip', detail: 'no approval required' });
  } else {
    const ap = input.approval ?? null;
    const c = ap ? checkApproval(ap, tool.name, a, now) : null;
    const ask = (reason: string, detail: string, existing?: string): Evaluation => {
      verdicts.push({ stage: 'approval', verdict: 'ask', detail, data: { policyIds: res.reasons, ...(existing ? { approvalId: existing } : {}) } });
      return {
        decision: {
          effect: 'ask',
          argsDigest: digest as string,
          args: a,
          policyIds: res.reasons,
          reason,
          ...(existing ? { approvalId: existing } : {}),
        },
        verdicts,
        argsDigest: digest,
        breakerNext: counted,
      };
    };
    const needs = `${subject} needs an operator's approval (policy ${res.reasons.filter((id) => policy.policy(id)?.approval).map((id) => quote(id)).join(', ')})`;
    if (!ap || !c) return ask(`${needs}; it has been parked until someone decides`, 'approval required, none held');
    switch (c.status) {
      case 'match':
        approvalId = ap.id;
        verdicts.push({ stage: 'approval', verdict: 'pass', detail: `approved by ${ap.decidedBy ?? 'unknown'}`, data: { approvalId: ap.id, decidedBy: ap.decidedBy } });
        break;
      case 'pending':
        return ask(`${needs}; it is still waiting for a decision`, 'approval still pending', ap.id);
      case 'denied':
        return deny(
          'approval',
          'approval_denied',
          `${subject} was refused by ${ap.decidedBy ? `operator ${ap.decidedBy}` : 'an operator'}; do not retry it unchanged`,
          'operator denied',
          { approvalId: ap.id, decidedBy: ap.decidedBy },
        );
      case 'expired':
        return deny(
          'approval',
          'approval_expired',
          `the approval for ${subject} expired at ${new Date(c.at).toISOString()} before it was used; call again to ask for a new approval`,
          'approval expired',
          { approvalId: ap.id },
        );
      case 'used':
        return ask(`${needs}; approval ${ap.id} was already used by an earlier run, and each approval runs once`, 'approval already used', undefined);
      case 'mismatch':
        return ask(`${needs}; approval ${ap.id} was given for a different ${c.field === 'tool' ? 'tool' : 'set of arguments'}`, `approval ${c.field} mismatch`, undefined);
    }
  }

  // 5. breaker
  const b = checkBreaker(counted, settings, now);
  if (b.tripped) {
    return deny(
      'breaker',
      'breaker_open',
      `the circuit breaker of this session is open (${b.reason}), so no tool call runs until an operator resets it; stop and report what you were doing`,
      `breaker open: ${b.reason}`,
      { openedAt: b.openedAt },
    );
  }
  verdicts.push({ stage: 'breaker', verdict: 'pass', detail: 'breaker closed' });

  return {
    decision: {
      effect: 'allow',
      args: a,
      argsDigest: digest,
      ...(match?.ok ? { planStepId: match.stepId } : {}),
      ...(approvalId ? { approvalId } : {}),
    },
    verdicts,
    argsDigest: digest,
    ...(match?.ok ? { planNext: match.nextState } : {}),
    breakerNext: counted,
  };
}

// ---- stage 6: result -----------------------------------------------------------------------------------

export interface ResultInput {
  tool: ToolDefinition;
  /** decision.argsDigest of the call that ran. */
  argsDigest: string;
  /** What the executor returned; for command tools, stdout parsed by parseCommandOutput. */
  output: unknown;
  /** Set when there is no usable output: stdout was not JSON or was cut at the cap, a command tool exited non-zero. */
  outputError?: string;
  breaker: { state: BreakerState; settings: BreakerSettings };
  now: number;
}

export type ResultCheck =
  | { ok: true; result: unknown; verdict: StageVerdict; /** Counts as a failure for the breaker (e.g. non-zero exit). */ failed: boolean; breakerNext: BreakerState }
  | { ok: false; decision: DenyDecision; verdict: StageVerdict; failed: true; breakerNext: BreakerState };

/** A successful run that still failed, for the breaker: shell.exec exiting non-zero or timing out. */
function ranButFailed(tool: ToolDefinition, output: unknown): boolean {
  if (tool.executor.kind === 'builtin' && tool.executor.name === 'shell.exec') {
    const o = output as { exitCode?: unknown; timedOut?: unknown };
    return o.exitCode !== 0 || o.timedOut === true;
  }
  return false;
}

/** Stage 6: validates the executor's output and records the call's outcome with the breaker. */
export function checkResult(input: ResultInput): ResultCheck {
  const { tool, output, now } = input;
  const { state, settings } = input.breaker;
  const outcome = (failed: boolean): BreakerState => recordOutcome(state, settings, { callKey: input.argsDigest, tool: tool.name, failed }, now);
  const invalid = (errors: string[]): ResultCheck => {
    const detail = `output invalid: ${errors.join('; ')}`;
    return {
      ok: false,
      decision: {
        effect: 'deny',
        stage: 'result',
        code: 'result_invalid',
        reason:
          `${tool.name} ran, but its output is not valid (${errors.join('; ')}), so no result is returned. Treat the call as failed ` +
          'and check the state of the sandbox before retrying: it may have had effects',
      },
      verdict: { stage: 'result', verdict: 'deny', code: 'result_invalid', detail, data: { errors } },
      failed: true,
      breakerNext: outcome(true),
    };
  };
  if (input.outputError !== undefined) return invalid([input.outputError]);
  const v = validateResult(tool, output);
  if (!v.ok) return invalid(v.errors);
  const images = imageErrors(tool, output);
  if (images.length) return invalid(images);
  const failed = ranButFailed(tool, output);
  return {
    ok: true,
    result: output,
    verdict: { stage: 'result', verdict: 'pass', detail: failed ? 'output valid; the call failed' : 'output valid', data: { failed } },
    failed,
    breakerNext: outcome(failed),
  };
}

/**
 * A command tool's stdout → its result. Output cut at the capture cap is refused even when what is left
 * happens to parse: a truncated result must never look like a whole one.
 */
export function parseCommandOutput(stdout: string, opts: { truncated: boolean }): { ok: true; value: unknown } | { ok: false; error: string } {
  if (opts.truncated) return { ok: false, error: 'output was truncated at the size limit' };
  try {
    return { ok: true, value: JSON.parse(stdout) as unknown };
  } catch (e) {
    return { ok: false, error: `stdout is not JSON (${(e as Error).message})` };
  }
}

/** Each of a tool's image results must be the PNG it declares: its size, and the digest it carries. */
function imageErrors(tool: ToolDefinition, output: unknown): string[] {
  const errors: string[] = [];
  for (const field of tool.imageResults ?? []) {
    const img = (output as Record<string, unknown>)[field] as { data?: unknown; width?: unknown; height?: unknown; sha256?: unknown } | undefined;
    if (img === undefined) continue;
    const bytes = Buffer.from(String(img.data), 'base64');
    const info = pngInfo(bytes);
    if (!info) errors.push(`${field} is not a PNG`);
    else if (info.width !== img.width || info.height !== img.height) errors.push(`${field} is ${info.width}x${info.height}, not the ${String(img.width)}x${String(img.height)} it declares`);
    else if (img.sha256 !== undefined && img.sha256 !== sha256Hex(bytes)) errors.push(`${field} does not match its sha256`);
  }
  return errors;
}
