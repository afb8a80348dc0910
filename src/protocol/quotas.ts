/**
 * Wire types and schemas of tenant quotas (issue 12 §3): `GET /v1/tenants/:id` reports a tenant with the
 * limits in force and what it uses; `PUT /v1/tenants/:id/quotas` (root only) sets some of them. A request
 * over a limit answers 429 `quota_exceeded` with `details: { limit, max, current, requested }`.
 */
import * as z from 'zod';
import type { TenantQuotas } from '../core/records.js';
import type { TenantView } from './types.js';

/** GB are GiB (2^30 bytes). */
export type TenantQuotasView = TenantQuotas;

export interface TenantUsageView {
  /** Sessions not terminated or failed. */
  sessions: number;
  /** MiB of the sessions holding a machine. */
  memoryMb: number;
  /** GiB of snapshots on disk (named and hibernation). */
  snapshotGb: number;
  snapshotBytes: number;
  /** GiB through the egress proxy. */
  egressGb: number;
  egressBytes: number;
}

export interface TenantDetailView extends TenantView {
  quotas: TenantQuotasView;
  usage: TenantUsageView;
}

export type SetTenantQuotasBody = Partial<TenantQuotas>;

const count = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const gb = z.number().min(0).max(1e12);

export const SetTenantQuotasBodySchema = z.strictObject({
  maxSessions: count.optional(),
  maxMemoryMb: count.optional(),
  maxSnapshotGb: gb.optional(),
  maxEgressGb: gb.optional(),
});

export const TenantQuotasViewSchema = z.strictObject({ maxSessions: z.number(), maxMemoryMb: z.number(), maxSnapshotGb: z.number(), maxEgressGb: z.number() });
export const TenantUsageViewSchema = z.strictObject({
  sessions: z.number(),
  memoryMb: z.number(),
  snapshotGb: z.number(),
  snapshotBytes: z.number(),
  egressGb: z.number(),
  egressBytes: z.number(),
});
export const TenantDetailViewSchema = z.strictObject({
  id: z.string(),
  name: z.string(),
  createdAt: z.string(),
  quotas: TenantQuotasViewSchema,
  usage: TenantUsageViewSchema,
});

const GIB = 2 ** 30;
const gib = (bytes: number) => Math.round((bytes / GIB) * 1e6) / 1e6;

export function toTenantUsageView(u: { sessions: number; memoryMb: number; snapshotBytes: number; egressBytes: number }): TenantUsageView {
  return { sessions: u.sessions, memoryMb: u.memoryMb, snapshotGb: gib(u.snapshotBytes), snapshotBytes: u.snapshotBytes, egressGb: gib(u.egressBytes), egressBytes: u.egressBytes };
}

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const _checks: [
  Same<z.output<typeof SetTenantQuotasBodySchema>, SetTenantQuotasBody>,
  Same<z.output<typeof TenantDetailViewSchema>, TenantDetailView>,
] = [true, true];
void _checks;
