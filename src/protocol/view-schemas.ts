/**
 * Zod schemas of every response view, for the OpenAPI document (openapi.ts) and the tests that validate
 * real responses against it. They are checked against the TypeScript view types below (a type-level test:
 * a field added to one and not the other does not compile). Objects are strict, so a field the server
 * sends but the document does not name fails validation.
 */
import * as z from 'zod';
import { APPROVAL_STATUSES } from '../core/records.js';
import type * as G from './gate.js';
import type * as P from './processes.js';
import { BackendSchema, SessionStateSchema } from './schemas.js';
import type * as T from './types.js';

const Iso = z.string().describe('ISO-8601 time');
const IsoOrNull = Iso.nullable();

export const SessionSettingsViewSchema = z.strictObject({
  memoryMb: z.number().int(),
  diskMb: z.number().int().nullable().describe('room for the session\'s writes, MiB (gvisor: inside memoryMb; qemu: the disk grown to it); null: the image\'s disk as built (qemu)'),
  cpus: z.number(),
  idleTimeoutS: z.number().int(),
  env: z.array(z.string()),
  desktop: z.strictObject({ width: z.number().int(), height: z.number().int() }).nullable(),
});

export const MeteringViewSchema = z.strictObject({
  cpuSeconds: z.number(),
  peakMemoryBytes: z.number(),
  execCount: z.number().int(),
  bytesIn: z.number(),
  bytesOut: z.number(),
  egressConnections: z.number().int(),
  egressRefused: z.number().int(),
  egressBytesOut: z.number(),
  egressBytesIn: z.number(),
  stateSeconds: z.partialRecord(SessionStateSchema, z.number()),
});

const sessionFields = {
  id: z.string(),
  tenantId: z.string(),
  state: SessionStateSchema,
  backend: BackendSchema,
  objective: z.string().nullable(),
  settings: SessionSettingsViewSchema,
  metadata: z.record(z.string(), z.string()),
  failureReason: z.string().nullable(),
  parentSnapshotId: z.string().nullable(),
  hostname: z.string(),
  createdAt: Iso,
  updatedAt: Iso,
  stateSince: Iso,
  lastActivityAt: Iso,
  metering: MeteringViewSchema,
};
export const SessionViewSchema = z.strictObject(sessionFields);
export const CreatedSessionViewSchema = z.strictObject({ ...sessionFields, agentToken: z.string().describe('shown once') });
export const SessionListViewSchema = z.strictObject({ sessions: z.array(SessionViewSchema), nextCursor: z.string().nullable() });
export const TerminatedViewSchema = z.strictObject({ id: z.string(), state: z.literal('terminated') });

export const SnapshotViewSchema = z.strictObject({
  snapshotId: z.string(),
  id: z.string(),
  tenantId: z.string(),
  sessionId: z.string(),
  name: z.string().nullable(),
  kind: z.enum(['named', 'hibernation', 'template']),
  backend: BackendSchema,
  sizeBytes: z.number(),
  createdAt: Iso,
  settings: SessionSettingsViewSchema,
});
export const SnapshotListViewSchema = z.strictObject({ snapshots: z.array(SnapshotViewSchema) });
export const ForkViewSchema = z.strictObject({ sessions: z.array(CreatedSessionViewSchema) });

export const WireErrorSchema = z.strictObject({
  code: z.string(),
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
  retryable: z.boolean().optional(),
});
export const ErrorBodySchema = z.strictObject({ error: WireErrorSchema });

const b64 = z.string().describe('base64 bytes');
/** One line of the exec NDJSON stream. */
export const ExecStreamLineSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('started'), execId: z.string(), sessionId: z.string().optional() }),
  z.strictObject({ type: z.literal('stdout'), data: b64 }),
  z.strictObject({ type: z.literal('stderr'), data: b64 }),
  z.strictObject({ type: z.literal('exit'), code: z.number().int(), signal: z.number().int().nullable(), timedOut: z.boolean() }),
  z.strictObject({ type: z.literal('error'), error: WireErrorSchema }),
  z.strictObject({ type: z.literal('ping') }),
]);

export const StdinViewSchema = z.strictObject({ bytes: z.number().int(), closed: z.boolean() });
export const KillViewSchema = z.strictObject({ execId: z.string(), signal: z.number().int() });

const fileEntry = {
  name: z.string(),
  type: z.enum(['file', 'dir', 'symlink', 'other']),
  size: z.number(),
  mode: z.number().int(),
  mtimeMs: z.number(),
};
export const FileEntrySchema = z.strictObject(fileEntry);
export const FileStatViewSchema = z.strictObject({ ...fileEntry, path: z.string() });
export const FileListViewSchema = z.strictObject({ path: z.string(), entries: z.array(FileEntrySchema) });
export const FileWriteViewSchema = z.strictObject({ path: z.string(), bytes: z.number().int() });
export const OkViewSchema = z.strictObject({ ok: z.literal(true) });

export const TenantViewSchema = z.strictObject({ id: z.string(), name: z.string(), createdAt: Iso });
export const CreatedTenantViewSchema = z.strictObject({ id: z.string(), name: z.string(), createdAt: Iso, apiKey: z.string().describe('shown once') });
export const TenantListViewSchema = z.strictObject({ tenants: z.array(TenantViewSchema) });

export const PrincipalSchema = z.strictObject({ kind: z.enum(['root', 'operator', 'agent', 'system', 'anonymous', 'watcher']), id: z.string(), tenantId: z.string().nullable() });
export const AuditEntryViewSchema = z.strictObject({
  seq: z.number().int(),
  ts: Iso,
  tsMs: z.number().int(),
  tenantId: z.string().nullable(),
  sessionId: z.string().nullable(),
  principal: PrincipalSchema,
  action: z.string(),
  outcome: z.string(),
  data: z.record(z.string(), z.unknown()),
  prevHash: z.string(),
  hash: z.string(),
});
export const AuditListViewSchema = z.strictObject({ entries: z.array(AuditEntryViewSchema) });
export const SignedHeadViewSchema = z.strictObject({
  treeSize: z.number().int(),
  rootHash: z.string(),
  timestamp: z.number().int(),
  keyId: z.string(),
  signature: z.string(),
});
const CheckpointCheckSchema = z.strictObject({
  treeSize: z.number().int(),
  rootHash: z.string(),
  timestamp: z.number().int(),
  keyId: z.string(),
  ok: z.boolean(),
  problem: z.enum(['signature', 'truncated', 'rewritten', 'unsigned', 'rollback']).optional(),
  firstBadSeq: z.number().int().optional(),
  proof: z.array(z.string()).optional(),
});
const TreeVerifySchema = z.strictObject({
  ok: z.boolean(),
  treeSize: z.number().int(),
  rootHash: z.string(),
  storedTreeFirstBadSeq: z.number().int().optional(),
  latestSigned: CheckpointCheckSchema.optional(),
  checkpoints: z.array(CheckpointCheckSchema),
});
export const AuditVerifyViewSchema = z.union([
  z.strictObject({ ok: z.literal(true), entries: z.number().int(), headHash: z.string(), tree: TreeVerifySchema.optional() }),
  z.strictObject({
    ok: z.literal(false),
    entries: z.number().int(),
    firstBadSeq: z.number().int().nullable(),
    problem: z.enum(['edited', 'removed', 'reordered', 'broken_link', 'truncated', 'rewritten', 'unsigned', 'signature', 'rollback']),
    tree: TreeVerifySchema.optional(),
  }),
]);
export const AuditKeyViewSchema = z.strictObject({ algorithm: z.literal('Ed25519'), keyId: z.string(), publicKey: z.string(), publicKeyBase64: z.string() });
export const InclusionProofViewSchema = z.strictObject({
  format: z.literal('berth-audit-inclusion/1'),
  seq: z.number().int(),
  leafIndex: z.number().int(),
  entry: z.string(),
  proof: z.array(z.string()),
  head: SignedHeadViewSchema,
});
export const ConsistencyProofViewSchema = z.strictObject({ fromSize: z.number().int(), toSize: z.number().int(), proof: z.array(z.string()), head: SignedHeadViewSchema });

export const StartingViewSchema = z.strictObject({ phase: z.string(), message: z.string(), detail: z.string().nullable(), elapsedS: z.number() });
export const HealthViewSchema = z.strictObject({
  ok: z.boolean(),
  backends: z.record(z.string(), z.strictObject({ available: z.boolean(), reason: z.string().optional() })),
  starting: StartingViewSchema.optional(),
});

// ---- the gate ----

const JsonObject = z.record(z.string(), z.unknown());
const Risk = z.enum(['read', 'write', 'irreversible']);
const Stage = z.enum(['control', 'arguments', 'policy', 'plan', 'approval', 'breaker', 'result']);

export const ToolViewSchema = z.strictObject({ name: z.string(), description: z.string(), inputSchema: JsonObject, outputSchema: JsonObject, risk: Risk });
export const ToolListViewSchema = z.strictObject({ tools: z.array(ToolViewSchema) });
export const CallResultViewSchema = z.discriminatedUnion('decision', [
  z.strictObject({ decision: z.literal('allow'), result: z.unknown(), approvalId: z.string().optional() }),
  z.strictObject({ decision: z.literal('deny'), stage: Stage, code: z.string(), reason: z.string(), retryable: z.literal(true).optional() }),
  z.strictObject({ decision: z.literal('pending'), approvalId: z.string() }),
]);
export const ApprovalViewSchema = z.strictObject({
  approvalId: z.string(),
  id: z.string(),
  tenantId: z.string(),
  sessionId: z.string(),
  tool: z.string(),
  args: JsonObject,
  argsDigest: z.string(),
  step: z.string().nullable(),
  status: z.enum(APPROVAL_STATUSES),
  policyIds: z.array(z.string()),
  requestedBy: z.string(),
  createdAt: Iso,
  expiresAt: IsoOrNull,
  decidedBy: z.string().nullable(),
  decidedAt: IsoOrNull,
  reason: z.string().nullable(),
  usedAt: IsoOrNull,
  result: CallResultViewSchema.nullable(),
  screenshotUrl: z.string().nullable(),
});
export const ApprovalListViewSchema = z.strictObject({ approvals: z.array(ApprovalViewSchema) });
export const PolicyViewSchema = z.strictObject({
  tenantId: z.string(),
  text: z.string(),
  version: z.number().int(),
  isDefault: z.boolean(),
  updatedAt: IsoOrNull,
  updatedBy: z.string().nullable(),
  digest: z.string(),
  warnings: z.array(z.string()),
});
export const ToolDefinitionViewSchema = z.strictObject({
  name: z.string(),
  description: z.string(),
  inputSchema: JsonObject,
  outputSchema: JsonObject,
  risk: Risk,
  executor: JsonObject,
  pathArgs: z.array(z.string()).optional(),
  opaqueArgs: z.array(z.string()).optional(),
  imageResults: z.array(z.string()).optional(),
  builtin: z.boolean(),
  updatedAt: IsoOrNull,
  updatedBy: z.string().nullable(),
});
export const ToolDefinitionListViewSchema = z.strictObject({ tools: z.array(ToolDefinitionViewSchema) });
export const GateViewSchema = z.strictObject({
  sessionId: z.string(),
  tenantId: z.string(),
  tools: z.array(z.string()),
  egressAllow: z.array(z.string()),
  httpAllow: z.array(z.string()),
  egressAllowCidr: z.array(z.string()),
  approvalTtlS: z.number().int(),
  breaker: z.strictObject({
    failures: z.number().int(),
    perMinute: z.number().int(),
    open: z.boolean(),
    trip: z.string().nullable(),
    reason: z.string().nullable(),
    openedAt: IsoOrNull,
    streakFailures: z.number().int(),
  }),
  pausedByBreaker: z.boolean(),
  calls: z.number().int(),
});
export const PlanStepSchema = z.strictObject({ id: z.string(), tool: z.string(), arguments: JsonObject, repeatable: z.boolean().optional() });
export const PlanViewSchema = z.strictObject({
  sessionId: z.string(),
  plan: z.strictObject({ objective: z.string(), steps: z.array(PlanStepSchema) }).nullable(),
  state: z.strictObject({ cursor: z.number().int(), consumed: z.record(z.string(), z.number().int()) }).nullable(),
  setAt: IsoOrNull,
  setBy: z.string().nullable(),
});

// ---- background processes and file trees (issue 9 §1, §4) ----

export const BackgroundExecViewSchema = z.strictObject({ execId: z.string(), pid: z.number().int() });
export const ProcessViewSchema = z.strictObject({
  execId: z.string(),
  pid: z.number().int(),
  argv: z.array(z.string()),
  state: z.enum(['running', 'exited']),
  exitCode: z.number().int().nullable().describe('null while running'),
  signal: z.number().int().nullable(),
  timedOut: z.boolean(),
  startedAt: Iso,
  endedAt: IsoOrNull,
  stdoutBytes: z.number().int().describe('bytes written since the start (the sandbox keeps the last 1 MiB)'),
  stderrBytes: z.number().int(),
});
export const ProcessListViewSchema = z.strictObject({ processes: z.array(ProcessViewSchema) });
export const ProcessKillViewSchema = z.strictObject({ execId: z.string(), signal: z.number().int(), signalled: z.boolean().describe('false when it had already ended') });
const Cursor = z.string().describe('stdoutOffset,stderrOffset: pass as ?offset= to resume');
/** One line of the background-process output NDJSON stream. */
export const ProcessOutputLineSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('stdout'), offset: z.number().int(), data: b64, cursor: Cursor }),
  z.strictObject({ type: z.literal('stderr'), offset: z.number().int(), data: b64, cursor: Cursor }),
  z.strictObject({ type: z.literal('exit'), code: z.number().int(), signal: z.number().int().nullable(), timedOut: z.boolean() }),
  z.strictObject({ type: z.literal('end'), cursor: Cursor }),
  z.strictObject({ type: z.literal('error'), error: WireErrorSchema }),
  z.strictObject({ type: z.literal('ping') }),
]);
export const TarPushViewSchema = z.strictObject({ path: z.string(), bytes: z.number().int().describe('bytes of tar stream received') });
/** One line of the files watch NDJSON stream. */
export const WatchLineSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('event'), event: z.enum(['create', 'modify', 'delete', 'move_from', 'move_to', 'attrib', 'overflow']), path: z.string(), isDir: z.boolean() }),
  z.strictObject({ type: z.literal('ready') }),
  z.strictObject({ type: z.literal('error'), error: WireErrorSchema }),
  z.strictObject({ type: z.literal('ping') }),
]);

// The schemas describe exactly what the view types say (either changing alone fails to compile).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Out<S extends z.ZodType> = z.output<S>;
const _views: [
  Same<Out<typeof SessionViewSchema>, T.SessionView>,
  Same<Out<typeof CreatedSessionViewSchema>, T.CreatedSessionView>,
  Same<Out<typeof SessionListViewSchema>, T.SessionListView>,
  Same<Out<typeof TerminatedViewSchema>, T.TerminatedView>,
  Same<Out<typeof SnapshotViewSchema>, T.SnapshotView>,
  Same<Out<typeof SnapshotListViewSchema>, T.SnapshotListView>,
  Same<Out<typeof ForkViewSchema>, T.ForkView>,
  Same<Out<typeof WireErrorSchema>, T.WireError>,
  Same<Out<typeof ErrorBodySchema>, T.ErrorBody>,
  Same<Out<typeof ExecStreamLineSchema>, T.ExecStreamLine>,
  Same<Out<typeof StdinViewSchema>, T.StdinView>,
  Same<Out<typeof KillViewSchema>, T.KillView>,
  Same<Out<typeof FileStatViewSchema>, T.FileStatView>,
  Same<Out<typeof FileListViewSchema>, T.FileListView>,
  Same<Out<typeof FileWriteViewSchema>, T.FileWriteView>,
  Same<Out<typeof OkViewSchema>, T.OkView>,
  Same<Out<typeof TenantViewSchema>, T.TenantView>,
  Same<Out<typeof CreatedTenantViewSchema>, T.CreatedTenantView>,
  Same<Out<typeof TenantListViewSchema>, T.TenantListView>,
  Same<Out<typeof AuditEntryViewSchema>, T.AuditEntryView>,
  Same<Out<typeof AuditListViewSchema>, T.AuditListView>,
  Same<Out<typeof AuditVerifyViewSchema>, T.AuditVerifyView>,
  Same<Out<typeof AuditKeyViewSchema>, T.AuditKeyView>,
  Same<Out<typeof SignedHeadViewSchema>, T.SignedHeadView>,
  Same<Out<typeof InclusionProofViewSchema>, T.InclusionProofView>,
  Same<Out<typeof ConsistencyProofViewSchema>, T.ConsistencyProofView>,
  Same<Out<typeof HealthViewSchema>, T.HealthView>,
  Same<Out<typeof ToolListViewSchema>, G.ToolListView>,
  Same<Out<typeof CallResultViewSchema>, G.CallResultView>,
  Same<Out<typeof ApprovalViewSchema>, G.ApprovalView>,
  Same<Out<typeof ApprovalListViewSchema>, G.ApprovalListView>,
  Same<Out<typeof PolicyViewSchema>, G.PolicyView>,
  Same<Out<typeof ToolDefinitionViewSchema>, G.ToolDefinitionView>,
  Same<Out<typeof ToolDefinitionListViewSchema>, G.ToolDefinitionListView>,
  Same<Out<typeof GateViewSchema>, G.GateView>,
  Same<Out<typeof PlanViewSchema>, G.PlanView>,
  Same<Out<typeof BackgroundExecViewSchema>, P.BackgroundExecView>,
  Same<Out<typeof ProcessViewSchema>, P.ProcessView>,
  Same<Out<typeof ProcessListViewSchema>, P.ProcessListView>,
  Same<Out<typeof ProcessKillViewSchema>, P.ProcessKillView>,
  Same<Out<typeof ProcessOutputLineSchema>, P.ProcessOutputLine>,
  Same<Out<typeof TarPushViewSchema>, P.TarPushView>,
  Same<Out<typeof WatchLineSchema>, P.WatchLine>,
] = [true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true, true];
void _views;
