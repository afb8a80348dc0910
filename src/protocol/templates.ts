/**
 * Wire types and schemas of templates (issue 8 §4): the recipe, the build request and its NDJSON progress
 * stream, and the template view. A recipe is strict: an unknown field is a 400 naming it.
 */
import * as z from 'zod';
import { AppError } from '../core/errors.js';
import type { SnapshotRecord } from '../core/records.js';
import { AbsolutePath, BackendSchema, EnvRecord, LIMITS } from './schemas.js';
import type { BackendName } from '../core/sandbox.js';
import type { SessionSettingsView, WireError } from './types.js';
import { iso, settingsView } from './views.js';
import { SessionSettingsViewSchema } from './view-schemas.js';

export const TEMPLATE_LIMITS = {
  /** Commands of one recipe. */
  runItems: 256,
  /** Characters of one command (shell.exec's own limit). */
  commandChars: 262_144,
  files: 256,
  /** Characters of one file's content. */
  fileChars: 1024 * 1024,
  egressEntries: 256,
} as const;

export interface TemplateRecipeBody {
  /** Another template of the tenant to start from; default the base image. */
  from?: string;
  /** Shell commands (run with /bin/sh -c), in order; the first non-zero exit stops the build. */
  run: string[];
  /** Absolute path → UTF-8 content, written before the commands run (parents made). */
  files?: Record<string, string>;
  /** Environment of every step; without `from` also the machine's. */
  env?: Record<string, string>;
  /** Hosts (`host[:port]`, `*.suffix[:port]`) or CIDR ranges the build may connect to. */
  egressAllow?: string[];
}

export interface BuildTemplateBody {
  name: string;
  recipe: TemplateRecipeBody;
  /** Without recipe.from only: the backend (default the server's), memory and room for writes (MiB) and CPUs of the machine. */
  backend?: BackendName;
  memoryMb?: number;
  diskMb?: number;
  cpus?: number;
  /** Root only: the tenant that owns the template (default "default"). */
  tenantId?: string;
}

const TemplateName = z.string().min(1).max(LIMITS.nameChars);

export const TemplateRecipeSchema = z.strictObject({
  from: TemplateName.optional(),
  run: z.array(z.string().min(1).max(TEMPLATE_LIMITS.commandChars)).max(TEMPLATE_LIMITS.runItems),
  files: z
    .record(AbsolutePath, z.string().max(TEMPLATE_LIMITS.fileChars))
    .refine((r) => Object.keys(r).length <= TEMPLATE_LIMITS.files, { error: `must have at most ${TEMPLATE_LIMITS.files} entries` })
    .optional(),
  env: EnvRecord.optional(),
  egressAllow: z.array(z.string().min(1).max(300)).max(TEMPLATE_LIMITS.egressEntries).optional(),
});

export const BuildTemplateBodySchema = z.strictObject({
  name: TemplateName,
  recipe: TemplateRecipeSchema,
  backend: BackendSchema.optional(),
  memoryMb: z.number().int().min(LIMITS.memoryMb.min).max(LIMITS.memoryMb.max).optional(),
  diskMb: z.number().int().min(LIMITS.diskMb.min).max(LIMITS.diskMb.max).optional(),
  cpus: z.number().min(LIMITS.cpus.min).max(LIMITS.cpus.max).optional(),
  tenantId: z.string().min(1).max(64).optional(),
});

/** ?tenantId= on the template routes (root only). */
export const TemplateScopeQuerySchema = z.object({ tenantId: z.string().min(1).max(64).optional() });

export interface TemplateView {
  name: string;
  /** The image's snapshot id; sessions created from the template carry it as parentSnapshotId. */
  snapshotId: string;
  tenantId: string;
  backend: BackendName;
  /** The template it was built from, if any. */
  from: string | null;
  /** The recipe, with file paths only and env names only. */
  recipe: { run: string[]; files: string[]; env: string[]; egressAllow: string[] };
  sizeBytes: number;
  createdAt: string;
  createdBy: string;
  settings: SessionSettingsView;
}

export interface TemplateListView {
  templates: TemplateView[];
}

const SettingsView = SessionSettingsViewSchema;

export const TemplateViewSchema = z.strictObject({
  name: z.string(),
  snapshotId: z.string(),
  tenantId: z.string(),
  backend: BackendSchema,
  from: z.string().nullable(),
  recipe: z.strictObject({ run: z.array(z.string()), files: z.array(z.string()), env: z.array(z.string()), egressAllow: z.array(z.string()) }),
  sizeBytes: z.number(),
  createdAt: z.string().describe('ISO-8601 time'),
  createdBy: z.string(),
  settings: SettingsView,
});
export const TemplateListViewSchema = z.strictObject({ templates: z.array(TemplateViewSchema) });

export function toTemplateView(r: SnapshotRecord): TemplateView {
  const recipe = r.template?.recipe ?? { run: [] };
  return {
    name: r.name ?? '',
    snapshotId: r.id,
    tenantId: r.tenantId,
    backend: r.backend,
    from: recipe.from ?? null,
    recipe: {
      run: [...recipe.run],
      files: Object.keys(recipe.files ?? {}),
      env: Object.keys(recipe.env ?? {}).sort(),
      egressAllow: [...(recipe.egressAllow ?? [])],
    },
    sizeBytes: r.sizeBytes,
    createdAt: iso(r.createdAt),
    createdBy: r.template?.createdBy ?? '',
    settings: settingsView(r.settings),
  };
}

/** One line of the build stream (POST /v1/templates). Output bytes are base64. */
export type TemplateBuildLine =
  | { type: 'started'; name: string }
  | { type: 'session'; sessionId: string }
  | { type: 'step'; step: number; kind: 'file'; path: string }
  | { type: 'step'; step: number; kind: 'run'; command: string }
  | { type: 'stdout' | 'stderr'; step: number; data: string }
  | { type: 'exit'; step: number; code: number; timedOut: boolean }
  | { type: 'capturing' }
  | { type: 'done'; template: TemplateView }
  | { type: 'error'; error: WireError; step?: number }
  | { type: 'ping' };

const WireErrorLine = z.strictObject({
  code: z.string(),
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
  retryable: z.boolean().optional(),
});
const step = z.number().int().min(0);
export const TemplateBuildLineSchema = z.union([
  z.strictObject({ type: z.literal('started'), name: z.string() }),
  z.strictObject({ type: z.literal('session'), sessionId: z.string() }),
  z.strictObject({ type: z.literal('step'), step, kind: z.literal('file'), path: z.string() }),
  z.strictObject({ type: z.literal('step'), step, kind: z.literal('run'), command: z.string() }),
  z.strictObject({ type: z.enum(['stdout', 'stderr']), step, data: z.string().describe('base64 bytes') }),
  z.strictObject({ type: z.literal('exit'), step, code: z.number().int(), timedOut: z.boolean() }),
  z.strictObject({ type: z.literal('capturing') }),
  z.strictObject({ type: z.literal('done'), template: TemplateViewSchema }),
  z.strictObject({ type: z.literal('error'), error: WireErrorLine, step: step.optional() }),
  z.strictObject({ type: z.literal('ping') }),
]);

/** Parses one build line; throws AppError('internal') on anything the server never sends. */
export function decodeTemplateBuildLine(text: string): TemplateBuildLine {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new AppError('internal', 'malformed template build line (not JSON)');
  }
  const r = TemplateBuildLineSchema.safeParse(v);
  if (!r.success) throw new AppError('internal', `unexpected template build line: ${text.slice(0, 200)}`);
  return r.data as TemplateBuildLine;
}

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const _checks: [
  Same<z.output<typeof BuildTemplateBodySchema>, BuildTemplateBody>,
  Same<z.output<typeof TemplateViewSchema>, TemplateView>,
] = [true, true];
void _checks;
