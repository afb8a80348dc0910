/**
 * The tool gate through the SDK. With an agent token only `tools.list`, `tools.call` and `approvals.get`
 * (for its own session) are allowed; the rest are operator calls.
 *
 *   const r = await berth.tools.call(sessionId, 'fs.read', { path: '/etc/hostname' });
 *   if (r.decision === 'pending') … await berth.approvals.approve(r.approvalId) (as an operator)
 */
import type { ApprovalStatus } from '../core/records.js';
import type {
  ApprovalListView,
  ApprovalView,
  CallResultView,
  GateSettingsBody,
  GateView,
  PlanView,
  PolicyView,
  ToolDefinitionListView,
  ToolDefinitionView,
  ToolListView,
  ToolView,
} from '../protocol/gate.js';
import type { Transport } from './http.js';
import type { CallOpts } from './session.js';

const enc = (s: string) => encodeURIComponent(s);
const ses = (id: string) => `/sessions/${enc(id)}`;

/** Root names the tenant of a tenant-scoped call; operators act on their own. */
export interface TenantOpts extends CallOpts {
  tenantId?: string;
}

export class ToolsApi {
  constructor(private readonly t: Transport) {}

  /** The tools the session has (an agent sees only what it may call). */
  async list(sessionId: string, opts: CallOpts = {}): Promise<ToolView[]> {
    return (await this.t.json<ToolListView>('GET', `${ses(sessionId)}/tools`, { signal: opts.signal })).tools;
  }
  /**
   * Calls a tool through the gate. A call may run as long as the tool does, so no client deadline applies.
   * Sent with an Idempotency-Key and retried once if the connection fails, so the tool does not run twice.
   */
  call(sessionId: string, tool: string, args: unknown = {}, opts: CallOpts & { step?: string } = {}): Promise<CallResultView> {
    const json = { tool, args, ...(opts.step !== undefined ? { step: opts.step } : {}) };
    return this.t.json<CallResultView>('POST', `${ses(sessionId)}/calls`, { json, signal: opts.signal, deadline: false, idempotent: true });
  }
  /** Adds or replaces an operator tool of the tenant. */
  define(definition: unknown, opts: TenantOpts = {}): Promise<ToolDefinitionView> {
    return this.t.json<ToolDefinitionView>('POST', '/tools', { json: definition, query: { tenantId: opts.tenantId }, signal: opts.signal });
  }
  /** Every tool of the tenant, built-ins included. */
  async definitions(opts: TenantOpts = {}): Promise<ToolDefinitionView[]> {
    return (await this.t.json<ToolDefinitionListView>('GET', '/tools', { query: { tenantId: opts.tenantId }, signal: opts.signal })).tools;
  }
  /** Chooses which tools a session has (default: every built-in). */
  install(sessionId: string, tools: string[], opts: CallOpts = {}): Promise<GateView> {
    return this.t.json<GateView>('PUT', `${ses(sessionId)}/tools`, { json: { tools }, signal: opts.signal });
  }
}

export class ApprovalsApi {
  constructor(private readonly t: Transport) {}

  async list(opts: CallOpts & { states?: ApprovalStatus[]; sessionId?: string } = {}): Promise<ApprovalView[]> {
    const state = opts.states?.length ? opts.states.join(',') : undefined;
    return (await this.t.json<ApprovalListView>('GET', '/approvals', { query: { state, sessionId: opts.sessionId }, signal: opts.signal })).approvals;
  }
  /** Status and result of one approval of a session (agent tokens may ask about their own). */
  get(sessionId: string, approvalId: string, opts: CallOpts = {}): Promise<ApprovalView> {
    return this.t.json<ApprovalView>('GET', `${ses(sessionId)}/approvals/${enc(approvalId)}`, { signal: opts.signal });
  }
  /** Approves and runs the call at once; resolves with the approval holding the call's result. */
  /** The screen (PNG) kept when a computer call was parked, with the point it would act on marked. */
  async screenshot(approvalId: string, opts: CallOpts = {}): Promise<Uint8Array> {
    const { res } = await this.t.send('GET', `/approvals/${enc(approvalId)}/screenshot`, { signal: opts.signal });
    return new Uint8Array(await res.arrayBuffer());
  }

  approve(approvalId: string, opts: CallOpts = {}): Promise<ApprovalView> {
    return this.t.json<ApprovalView>('POST', `/approvals/${enc(approvalId)}/approve`, { json: {}, signal: opts.signal, deadline: false });
  }
  deny(approvalId: string, reason: string, opts: CallOpts = {}): Promise<ApprovalView> {
    return this.t.json<ApprovalView>('POST', `/approvals/${enc(approvalId)}/deny`, { json: { reason }, signal: opts.signal });
  }
}

export class PolicyApi {
  constructor(private readonly t: Transport) {}

  get(opts: TenantOpts = {}): Promise<PolicyView> {
    return this.t.json<PolicyView>('GET', '/policy', { query: { tenantId: opts.tenantId }, signal: opts.signal });
  }
  /** Replaces the tenant's Cedar policy; a policy that does not validate throws invalid_argument and changes nothing. */
  set(text: string, opts: TenantOpts = {}): Promise<PolicyView> {
    return this.t.json<PolicyView>('PUT', '/policy', { json: { policy: text }, query: { tenantId: opts.tenantId }, signal: opts.signal });
  }
}

export class PlansApi {
  constructor(private readonly t: Transport) {}

  get(sessionId: string, opts: CallOpts = {}): Promise<PlanView> {
    return this.t.json<PlanView>('GET', `${ses(sessionId)}/plan`, { signal: opts.signal });
  }
  /** Binds the session to a plan {objective, steps:[{id, tool, arguments, repeatable?}]}, replacing any other. */
  set(sessionId: string, plan: unknown, opts: CallOpts = {}): Promise<PlanView> {
    return this.t.json<PlanView>('PUT', `${ses(sessionId)}/plan`, { json: plan, signal: opts.signal });
  }
  clear(sessionId: string, opts: CallOpts = {}): Promise<PlanView> {
    return this.t.json<PlanView>('DELETE', `${ses(sessionId)}/plan`, { signal: opts.signal });
  }
}

export class GateApi {
  constructor(private readonly t: Transport) {}

  get(sessionId: string, opts: CallOpts = {}): Promise<GateView> {
    return this.t.json<GateView>('GET', `${ses(sessionId)}/gate`, { signal: opts.signal });
  }
  /** Changes the given settings; the others keep their value. */
  set(sessionId: string, settings: GateSettingsBody, opts: CallOpts = {}): Promise<GateView> {
    return this.t.json<GateView>('PUT', `${ses(sessionId)}/gate`, { json: settings, signal: opts.signal });
  }
  /** Closes a tripped breaker and resumes the session it paused. */
  resetBreaker(sessionId: string, opts: CallOpts = {}): Promise<GateView> {
    return this.t.json<GateView>('POST', `${ses(sessionId)}/breaker/reset`, { json: {}, signal: opts.signal, deadline: false });
  }
}
