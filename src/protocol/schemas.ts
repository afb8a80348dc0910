/**
 * Zod schemas for every request body and query string. The server parses with these (through
 * parseInput in validate.ts); the SDK and CLI may use them to fail early. Objects are strict: an unknown
 * field is an error, never silently dropped. Query schemas ignore unknown parameters.
 */
import * as z from 'zod';
import { BACKENDS } from '../core/sandbox.js';
import { SCREEN_LIMITS } from '../core/desktop.js';
import { SESSION_STATES } from '../core/state.js';
import type * as T from './types.js';

export const ENV_KEY_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const NO_NUL = (s: string) => !s.includes('\0');

/** Linux signal numbers (the sandbox is always Linux, whatever the host). */
export const SIGNALS: Readonly<Record<string, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGTSTP: 20,
};

export const LIMITS = {
  memoryMb: { min: 64, max: 16384 },
  diskMb: { min: 16, max: 16384 },
  cpus: { min: 0.1, max: 64 },
  idleTimeoutS: { min: 0, max: 604_800 },
  timeoutMs: { min: 0, max: 86_400_000 },
  forkCount: { min: 1, max: 64 },
  objectiveChars: 4096,
  metadataEntries: 32,
  metadataKeyChars: 128,
  metadataValueChars: 1024,
  envEntries: 128,
  envValueChars: 131_072,
  argvItems: 4096,
  pathChars: 4096,
  nameChars: 128,
  /** Largest JSON request body, bytes. File and stdin bodies are raw streams and have no such limit. */
  jsonBodyBytes: 1024 * 1024,
  auditLimit: 10_000,
  /** Largest page of GET /v1/sessions (?limit). */
  listLimit: 1000,
} as const;

const int = (min: number, max: number) => z.number().int().min(min).max(max);

/** An absolute path inside the sandbox. */
export const AbsolutePath = z
  .string()
  .min(1)
  .max(LIMITS.pathChars)
  .refine((s) => s.startsWith('/'), { error: 'must be an absolute path (start with "/")' })
  .refine(NO_NUL, { error: 'must not contain NUL bytes' });

export const EnvRecord = z
  .record(
    z.string().regex(ENV_KEY_RE, { error: `key must match ${ENV_KEY_RE}` }),
    z.string().max(LIMITS.envValueChars).refine(NO_NUL, { error: 'must not contain NUL bytes' }),
  )
  .refine((r) => Object.keys(r).length <= LIMITS.envEntries, { error: `must have at most ${LIMITS.envEntries} entries` });

export const MetadataRecord = z
  .record(z.string().min(1).max(LIMITS.metadataKeyChars), z.string().max(LIMITS.metadataValueChars))
  .refine((r) => Object.keys(r).length <= LIMITS.metadataEntries, {
    error: `must have at most ${LIMITS.metadataEntries} entries`,
  });

export const BackendSchema = z.enum(BACKENDS);
export const SessionStateSchema = z.enum(SESSION_STATES);

const Name = z
  .string()
  .min(1)
  .max(LIMITS.nameChars)
  .refine((s) => !/[\u0000-\u001f\u007f]/.test(s), { error: 'must not contain control characters' });

export const CreateSessionBodySchema = z.strictObject({
  objective: z.string().max(LIMITS.objectiveChars).optional(),
  memoryMb: int(LIMITS.memoryMb.min, LIMITS.memoryMb.max).optional(),
  diskMb: int(LIMITS.diskMb.min, LIMITS.diskMb.max).optional(),
  cpus: z.number().min(LIMITS.cpus.min).max(LIMITS.cpus.max).optional(),
  idleTimeoutS: int(LIMITS.idleTimeoutS.min, LIMITS.idleTimeoutS.max).optional(),
  env: EnvRecord.optional(),
  backend: BackendSchema.optional(),
  metadata: MetadataRecord.optional(),
  tenantId: z.string().min(1).max(64).optional(),
  template: z.string().min(1).max(LIMITS.nameChars).optional(),
  egressAllow: z.array(z.string().min(1).max(300)).max(256).optional(),
  egressAllowCidr: z.array(z.string().min(1).max(64)).max(256).optional(),
  desktop: z
    .union([
      z.boolean(),
      z.strictObject({
        width: int(SCREEN_LIMITS.min, SCREEN_LIMITS.maxWidth).optional(),
        height: int(SCREEN_LIMITS.min, SCREEN_LIMITS.maxHeight).optional(),
      }),
    ])
    .optional(),
});

export const ExecBodySchema = z.strictObject({
  argv: z
    .array(z.string().refine(NO_NUL, { error: 'must not contain NUL bytes' }))
    .min(1)
    .max(LIMITS.argvItems)
    .superRefine((argv, ctx) => {
      if (argv[0] === '') ctx.addIssue({ code: 'custom', path: [0], message: 'the command must not be empty' });
    }),
  cwd: AbsolutePath.optional(),
  env: EnvRecord.optional(),
  timeoutMs: int(LIMITS.timeoutMs.min, LIMITS.timeoutMs.max).optional(),
  stdin: z.boolean().optional(),
  background: z.boolean().optional(),
});

export const SignalSchema = z.union(
  [
    int(1, 64),
    z
      .string()
      .transform((s) => s.toUpperCase())
      .transform((s) => (s.startsWith('SIG') ? s : `SIG${s}`))
      .refine((s) => s in SIGNALS, { error: `must be a signal number 1..64 or a name (${Object.keys(SIGNALS).join(', ')})` })
      .transform((s) => SIGNALS[s] as number),
  ],
  { error: 'must be a signal number or name' },
);
export const KillBodySchema = z.strictObject({ signal: SignalSchema.optional() });

export const ForkBodySchema = z.strictObject({
  count: int(LIMITS.forkCount.min, LIMITS.forkCount.max).optional(),
});

export const SnapshotBodySchema = z.strictObject({ name: Name.optional() });

export const MkdirBodySchema = z.strictObject({ path: AbsolutePath, parents: z.boolean().optional() });

export const CreateTenantBodySchema = z.strictObject({ name: Name });

/** Lifecycle verbs (pause, resume, …) take no body; an empty object is accepted. */
export const EmptyBodySchema = z.strictObject({});

// ---- query strings (every value arrives as a string) ----

const queryBool = z.enum(['true', 'false', '1', '0'], { error: 'must be true or false' }).transform((s) => s === 'true' || s === '1');
const queryInt = (min: number, max: number) =>
  z
    .string()
    .regex(/^-?\d+$/, { error: 'must be an integer' })
    .transform(Number)
    .pipe(z.number().min(min).max(max));
const octalMode = z
  .string()
  .regex(/^0?[0-7]{3,4}$/, { error: 'must be an octal mode such as 644' })
  .transform((s) => parseInt(s, 8))
  .pipe(z.number().max(0o7777));

export const FilePathQuerySchema = z.object({ path: AbsolutePath });
/** parents=false makes a missing parent directory an error (default: created, as E2B does). */
export const WriteFileQuerySchema = z.object({ path: AbsolutePath, mode: octalMode.optional(), parents: queryBool.optional() });
export const RemoveFileQuerySchema = z.object({ path: AbsolutePath, recursive: queryBool.optional() });
export const StdinQuerySchema = z.object({ close: queryBool.optional() });
export const ListSessionsQuerySchema = z.object({
  /** Comma-separated states, e.g. "running,paused". */
  state: z
    .string()
    .transform((s) => s.split(',').filter((x) => x !== ''))
    .pipe(z.array(SessionStateSchema))
    .optional(),
  /** `metadata=K=V`, repeatable: only sessions carrying every one of these labels. */
  metadata: z
    .array(z.string().regex(/^[^=]+=/, { error: 'must be K=V' }))
    .max(LIMITS.metadataEntries)
    .transform((list) => Object.fromEntries(list.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])))
    .optional(),
  /** Page size, 1..LIMITS.listLimit; absent: every session. */
  limit: queryInt(1, LIMITS.listLimit).optional(),
  /** The `nextCursor` of the previous page. */
  after: z.string().min(1).max(200).optional(),
});
export const ListSnapshotsQuerySchema = z.object({ sessionId: z.string().min(1).max(64).optional() });
export const AuditQuerySchema = z.object({
  sessionId: z.string().min(1).max(64).optional(),
  afterSeq: queryInt(0, Number.MAX_SAFE_INTEGER).optional(),
  limit: queryInt(1, LIMITS.auditLimit).optional(),
});

export const AuditProveQuerySchema = z.object({ treeSize: queryInt(0, Number.MAX_SAFE_INTEGER).optional() });
export const AuditConsistencyQuerySchema = z.object({
  from: queryInt(0, Number.MAX_SAFE_INTEGER),
  to: queryInt(0, Number.MAX_SAFE_INTEGER).optional(),
});
/** Heads are checked one by one (core parseSignedHead) so an error names `checkpoints[i]`. */
export const AuditVerifyBodySchema = z.object({ checkpoints: z.array(z.unknown()).max(10_000).optional() });

// The schemas must accept exactly what the wire types describe.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const _checks: [
  Same<z.output<typeof CreateSessionBodySchema>, T.CreateSessionBody>,
  Same<z.output<typeof ExecBodySchema>, T.ExecBody>,
  Same<z.output<typeof ForkBodySchema>, T.ForkBody>,
  Same<z.output<typeof SnapshotBodySchema>, T.SnapshotBody>,
  Same<z.output<typeof MkdirBodySchema>, T.MkdirBody>,
  Same<z.output<typeof CreateTenantBodySchema>, T.CreateTenantBody>,
] = [true, true, true, true, true, true];
void _checks;
