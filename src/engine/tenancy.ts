/**
 * Tenants, their quotas (issue 12 §3), and their view of the audit log: each tenant sees its own entries,
 * root all of them.
 */
import {
  AppError,
  InvalidArgumentError,
  NotFoundError,
  newId,
  sha256Hex,
  verifyChainAsync,
  type AuditEntry,
  type Principal,
  type TenantQuotas,
  type TenantRecord,
  type VerifyResult,
} from '../core/index.js';
import type { TenantInfo } from './api.js';
import { newSecret } from './auth.js';
import type { SessionKernel } from './kernel.js';
import { checkQuotaInput, effectiveQuotas } from './quotas.js';
import { DEFAULT_TENANT_ID } from './tenants.js';
import { requireOperator, seesTenant, tenantFilter } from './visibility.js';

export class Tenancy {
  constructor(private readonly k: SessionKernel) {}

  /** Creates the default tenant on a new store. */
  async ensureDefaultTenant(): Promise<void> {
    const { store, clock } = this.k.o;
    if (!(await store.tenants.get(DEFAULT_TENANT_ID))) {
      await store.tenants.insert({ id: DEFAULT_TENANT_ID, name: 'default', apiKeyHash: sha256Hex(newSecret('btk')), createdAt: clock.now() });
    }
  }

  async createTenant(p: Principal, name: string): Promise<{ tenant: TenantRecord; apiKey: string }> {
    const k = this.k;
    if (p.kind !== 'root') throw new AppError('forbidden', 'only the root token may create tenants');
    if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/.test(name)) {
      throw new InvalidArgumentError('name: 1-63 characters of letters, digits, ".", "_" or "-"', { details: { field: 'name' } });
    }
    if ((await k.o.store.tenants.list()).some((t) => t.name === name)) throw new AppError('conflict', `tenant ${name} already exists`, { details: { field: 'name' } });
    const apiKey = newSecret('btk');
    const tenant: TenantRecord = { id: newId('tenant'), name, apiKeyHash: sha256Hex(apiKey), createdAt: k.o.clock.now() };
    await k.o.store.tenants.insert(tenant);
    await k.audit(p, tenant.id, null, 'tenant.create', 'ok', { name });
    return { tenant, apiKey };
  }

  async listTenants(p: Principal): Promise<TenantRecord[]> {
    requireOperator(p);
    return (await this.k.o.store.tenants.list()).filter((t) => seesTenant(p, t.id));
  }

  /** Root sees every tenant, an operator its own; agents are refused. */
  async getTenant(p: Principal, tenantId: string): Promise<TenantInfo> {
    requireOperator(p);
    const tenant = await this.k.o.store.tenants.get(tenantId);
    if (!tenant || !seesTenant(p, tenant.id)) throw new NotFoundError('tenant', tenantId);
    return { tenant, ...(await this.k.usage(tenant.id)) };
  }

  /** Root only: sets the given limits (the rest keep theirs); a limit below the current use is allowed and stops new use. */
  async setTenantQuotas(p: Principal, tenantId: string, input: Partial<Record<keyof TenantQuotas, unknown>>): Promise<TenantInfo> {
    const k = this.k;
    if (p.kind !== 'root') {
      if (p.kind === 'operator' && !seesTenant(p, tenantId)) throw new NotFoundError('tenant', tenantId);
      throw new AppError('forbidden', 'only the root token may set quotas');
    }
    const change = checkQuotaInput(input);
    const tenant = await k.o.store.tenants.get(tenantId);
    if (!tenant) throw new NotFoundError('tenant', tenantId);
    const next: TenantRecord = { ...tenant, quotas: { ...tenant.quotas, ...change } };
    await k.o.store.transaction(async () => {
      await k.o.store.tenants.put(next);
      await k.audit(p, tenantId, null, 'tenant.quotas', 'ok', { set: change, quotas: effectiveQuotas(next.quotas, k.quotaDefaults) });
    });
    return { tenant: next, ...(await k.usage(tenantId)) };
  }

  /**
   * The egress quota's hook for the egress proxy: throws 429 quota_exceeded when the session's tenant has
   * used its maxEgressGb (bytes each way, metering.egressBytesOut and egressBytesIn).
   */
  async checkEgressQuota(sessionId: string): Promise<void> {
    const r = await this.k.o.store.sessions.get(sessionId);
    if (!r) throw new NotFoundError('session', sessionId);
    await this.k.checkQuota(r.tenantId, { egress: true });
  }

  // ---- the audit log ----------------------------------------------------------------------------------

  async auditQuery(p: Principal, q: { sessionId?: string; afterSeq?: number; limit?: number }): Promise<AuditEntry[]> {
    // A watcher reads its session's entries (the timeline), and only those.
    if (p.kind === 'watcher') q = { ...q, sessionId: q.sessionId ?? p.id };
    else requireOperator(p, q.sessionId);
    if (q.sessionId) await this.k.record(p, q.sessionId);
    return this.k.o.audit.query({ ...q, ...tenantFilter(p) });
  }

  async recordConsoleAction(p: Principal, e: { action: string; outcome: string; data: Record<string, unknown> }): Promise<void> {
    if (!e.action.startsWith('console.')) throw new AppError('internal', `console audit actions start with "console.", got ${e.action}`);
    await this.k.audit(p, p.tenantId, null, e.action, e.outcome, e.data);
  }

  async auditVerify(p: Principal): Promise<VerifyResult> {
    if (p.kind !== 'root') throw new AppError('forbidden', 'only the root token may verify the whole audit chain');
    return this.k.o.verifyAudit ? this.k.o.verifyAudit() : verifyChainAsync(this.k.o.audit.scan());
  }
}
