/**
 * Templates: a named, immutable, per-tenant machine image built from a recipe. A build runs the recipe in a
 * fresh session (every file write and command through the tool gate, as the operator who asked), then
 * checkpoints the whole machine (memory, processes, files) into a snapshot of kind 'template' and ends the
 * build session. A session created from a template is restored from that image with a fresh identity, as
 * a fork branch is; it is an independent copy, so removing the template never touches it.
 *
 * Guarantees: a build that fails at any point (a step's non-zero exit, a refused call, a lost machine, the
 * caller going away) leaves nothing behind: no template, no image, no running build session. A name is
 * taken from the moment a build of it starts, so two builds of one name cannot both succeed.
 *
 * Tenant scope comes from the manager's one rule (steps.tenantFor): a template is only ever looked up
 * within the tenant the caller acts on, so another tenant's template is simply not found.
 */
import {
  AppError,
  InvalidArgumentError,
  NotFoundError,
  isAppError,
  type BackendName,
  type CallOptions,
  type ExecEvent,
  type ExecHandle,
  type Principal,
  type SnapshotRecord,
  type Store,
  type TemplateRecipe,
} from '../core/index.js';
import type { CreateSessionInput, SessionInfo, ToolGateApi } from './api.js';
import { requireOperator, who } from './gate-context.js';

/** Template names: as snapshot names. */
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/** Metadata label on a build session: which template it builds. */
export const BUILD_LABEL = 'berth.template.build';
/** Output of a failed step kept in its error, bytes of each stream (the tail: where errors are). */
const ERROR_OUTPUT_BYTES = 4096;

export interface BuildTemplateInput {
  name: string;
  recipe: TemplateRecipe;
  /** Only without recipe.from (a derived template takes its parent's). */
  backend?: BackendName;
  memoryMb?: number;
  diskMb?: number;
  cpus?: number;
  /** Root only: the tenant that will own the template. */
  tenantId?: string;
}

/** One line of a build's progress, in order: started, session, then per step step → output → exit, then done or error. */
export type BuildEvent =
  | { type: 'started'; name: string }
  | { type: 'session'; sessionId: string }
  | { type: 'step'; step: number; kind: 'file'; path: string }
  | { type: 'step'; step: number; kind: 'run'; command: string }
  | { type: 'stdout' | 'stderr'; step: number; data: Uint8Array }
  | { type: 'exit'; step: number; code: number; timedOut: boolean }
  | { type: 'capturing' }
  | { type: 'done'; template: SnapshotRecord }
  | { type: 'error'; error: AppError; step?: number };

export interface TemplateService {
  /**
   * Checks the request (name free, `from` found, allow-list entries valid) and throws on bad input before
   * anything starts; then the returned stream runs the build as it is read. Reading it to the end is what
   * builds the template; abandoning it (opts.signal) fails the build and cleans up.
   */
  build(p: Principal, input: BuildTemplateInput, opts?: CallOptions): Promise<AsyncIterable<BuildEvent>>;
  list(p: Principal, scope?: { tenantId?: string }): Promise<SnapshotRecord[]>;
  get(p: Principal, name: string, scope?: { tenantId?: string }): Promise<SnapshotRecord>;
  /** Sessions already created from it are independent copies and keep running. */
  delete(p: Principal, name: string, scope?: { tenantId?: string }): Promise<void>;
  /** A new session restored from the template (called by createSession when `template` is set). */
  createSession(p: Principal, input: CreateSessionInput, opts?: CallOptions): Promise<{ session: SessionInfo; agentToken: string }>;
}

/** What the manager lends the room (built in SessionManager's constructor over its own steps). */
export interface TemplateSteps {
  store: Store;
  gate: ToolGateApi;
  /** The tenant `p` acts on (root names one, default the default tenant); the manager's one rule. */
  tenantFor(p: Principal, requested: string | undefined): Promise<string>;
  createSession(p: Principal, input: CreateSessionInput, opts: CallOptions): Promise<{ session: SessionInfo; agentToken: string }>;
  /** A new session restored from an image with a fresh identity (one fork branch). */
  startFrom(p: Principal, snap: SnapshotRecord, input: { objective: string | null; metadata: Record<string, string>; idleTimeoutS?: number }, opts: CallOptions): Promise<{ session: SessionInfo; agentToken: string }>;
  /** Checkpoints a running session into a new image recorded as `fields` (kind template); its machine stops. */
  capture(sessionId: string, fields: Pick<SnapshotRecord, 'name' | 'template'>, opts: CallOptions): Promise<SnapshotRecord>;
  terminate(sessionId: string): Promise<void>;
  /** Sees the output of every command started in the session until the returned function is called. */
  tap(sessionId: string, fn: (ev: ExecEvent) => void): () => void;
  removeSnapshot(s: SnapshotRecord): Promise<void>;
  audit(p: Principal, tenantId: string, sessionId: string | null, action: string, outcome: string, data: Record<string, unknown>): Promise<unknown>;
}

/** Passes a command's events through, showing each to `fn` as it goes by. */
export function tapExec(h: ExecHandle, fn: (ev: ExecEvent) => void): ExecHandle {
  return {
    async *[Symbol.asyncIterator]() {
      for await (const ev of h) {
        fn(ev);
        yield ev;
      }
    },
    writeStdin: (d) => h.writeStdin(d),
    closeStdin: () => h.closeStdin(),
    kill: (sig) => h.kill(sig),
    wait: () => h.wait(),
  };
}

const HOST = /^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const IPV4_CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/;

/** An allow-list entry: `host`, `*.suffix`, either with `:port`, or a CIDR range. Returns why not, or null. */
export function allowEntryProblem(e: string): string | null {
  if (typeof e !== 'string' || e.length === 0 || e.length > 300) return 'must be a host name, a *.suffix wildcard or a CIDR range';
  const v4 = IPV4_CIDR.exec(e);
  if (v4) return v4.slice(1, 5).every((o) => Number(o) <= 255) && Number(v4[5]) <= 32 ? null : 'is not a valid IPv4 CIDR range';
  if (e.includes('/')) {
    const [addr, bits] = e.split('/');
    return /^[0-9A-Fa-f:]+$/.test(addr ?? '') && (addr ?? '').includes(':') && /^\d{1,3}$/.test(bits ?? '') && Number(bits) <= 128 ? null : 'is not a valid CIDR range';
  }
  const m = /^(.*?)(?::(\d{1,5}))?$/.exec(e);
  const host = m?.[1] ?? '';
  const port = m?.[2];
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return 'has a port outside 1..65535';
  return HOST.test(host) ? null : 'must be a host name, a *.suffix wildcard or a CIDR range';
}

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

function tail(parts: Uint8Array[]): string {
  const b = Buffer.concat(parts);
  return b.subarray(Math.max(0, b.byteLength - ERROR_OUTPUT_BYTES)).toString('utf8');
}

/** An async queue the build's producer pushes to and its stream reads from. */
class Queue<T> {
  private readonly items: T[] = [];
  private wake: (() => void) | null = null;
  push(x: T): void {
    this.items.push(x);
    this.wake?.();
    this.wake = null;
  }
  async next(): Promise<T> {
    while (this.items.length === 0) await new Promise<void>((r) => (this.wake = r));
    return this.items.shift() as T;
  }
}

export function templateService(s: TemplateSteps): TemplateService {
  /** Names being built, `tenant/name`: taken at build start, released at its end. */
  const building = new Set<string>();
  /** Creates restoring from an image right now, by snapshot id: delete waits for them before removing it. */
  const restoring = new Map<string, Set<Promise<unknown>>>();

  async function find(tenantId: string, name: string): Promise<SnapshotRecord | undefined> {
    return (await s.store.snapshots.list({ tenantId })).find((x) => x.kind === 'template' && x.name === name);
  }

  async function lookup(p: Principal, name: unknown, tenantId: string | undefined): Promise<SnapshotRecord> {
    requireOperator(p);
    const t = await s.tenantFor(p, tenantId);
    if (typeof name !== 'string' || !NAME.test(name)) throw new NotFoundError('template', String(name));
    const rec = await find(t, name);
    if (!rec) throw new NotFoundError('template', name);
    return rec;
  }

  async function check(p: Principal, input: BuildTemplateInput): Promise<{ tenantId: string; parent: SnapshotRecord | null }> {
    requireOperator(p);
    const tenantId = await s.tenantFor(p, input.tenantId);
    if (typeof input.name !== 'string' || !NAME.test(input.name)) {
      throw new InvalidArgumentError('name: 1-128 characters of letters, digits, ".", "_" or "-", starting with a letter or digit', { details: { field: 'name' } });
    }
    const r = input.recipe;
    (r.egressAllow ?? []).forEach((e, i) => {
      const why = allowEntryProblem(e);
      if (why) throw new InvalidArgumentError(`recipe.egressAllow.${i}: ${JSON.stringify(e)} ${why}`, { details: { field: `recipe.egressAllow.${i}` } });
    });
    for (const path of Object.keys(r.files ?? {})) {
      if (!path.startsWith('/') || path.includes('\0') || path.endsWith('/')) {
        throw new InvalidArgumentError(`recipe.files: ${JSON.stringify(path)} is not an absolute file path`, { details: { field: `recipe.files.${path}` } });
      }
    }
    let parent: SnapshotRecord | null = null;
    if (r.from !== undefined) {
      for (const f of ['backend', 'memoryMb', 'diskMb', 'cpus'] as const) {
        if (input[f] !== undefined) throw new InvalidArgumentError(`${f}: comes from the template named in recipe.from; leave it out`, { details: { field: f } });
      }
      parent = (await find(tenantId, r.from)) ?? null;
      if (!parent) throw new InvalidArgumentError(`recipe.from: no template ${JSON.stringify(r.from)} in this tenant`, { details: { field: 'recipe.from' } });
    }
    if ((await find(tenantId, input.name)) || building.has(`${tenantId}/${input.name}`)) {
      throw new AppError('conflict', `template ${input.name} already exists (templates are immutable: remove it first, or choose another name)`, { details: { field: 'name' } });
    }
    return { tenantId, parent };
  }

  async function* run(p: Principal, input: BuildTemplateInput, tenantId: string, parent: SnapshotRecord | null, opts: CallOptions): AsyncGenerator<BuildEvent> {
    const key = `${tenantId}/${input.name}`;
    const r = input.recipe;
    const env = r.env ?? {};
    let sessionId: string | null = null;
    let step = -1;
    const q = new Queue<BuildEvent | { type: 'end' }>();
    // The build runs as a task feeding the queue, so output reaches the reader while a command still runs.
    let last: BuildEvent | null = null;
    const task = (async () => {
      try {
        const meta = { [BUILD_LABEL]: input.name };
        const created = parent
          ? await s.startFrom(p, parent, { objective: `template build: ${input.name}`, metadata: meta }, opts)
          : await s.createSession(p, {
              tenantId, objective: `template build: ${input.name}`, metadata: meta, env,
              ...(input.backend !== undefined ? { backend: input.backend } : {}),
              ...(input.memoryMb !== undefined ? { memoryMb: input.memoryMb } : {}),
              ...(input.diskMb !== undefined ? { diskMb: input.diskMb } : {}),
              ...(input.cpus !== undefined ? { cpus: input.cpus } : {}),
            }, opts);
        const sid = created.session.id;
        sessionId = sid;
        q.push({ type: 'session', sessionId: sid });
        const call = async (tool: string, args: Record<string, unknown>): Promise<Record<string, unknown>> => {
          const res = await s.gate.callTool(p, sid, { tool, args }, opts);
          if (res.decision === 'deny') {
            throw new InvalidArgumentError(`recipe step ${step} was refused by the gate (${res.stage}: ${res.reason})`, { details: { field: stepField(r, step), step, stage: res.stage, gateCode: res.code } });
          }
          if (res.decision === 'pending') {
            throw new InvalidArgumentError(`recipe step ${step} needs an operator's approval (${res.approvalId}); a template builds only from calls the policy allows outright`, { details: { field: stepField(r, step), step, approvalId: res.approvalId } });
          }
          return res.result as Record<string, unknown>;
        };
        for (const [path, content] of Object.entries(r.files ?? {})) {
          step++;
          q.push({ type: 'step', step, kind: 'file', path });
          const dir = path.slice(0, path.lastIndexOf('/'));
          if (dir) {
            const mk = await call('shell.exec', { command: `mkdir -p -- ${shellQuote(dir)}` });
            if (mk.exitCode !== 0) throw new InvalidArgumentError(`recipe.files: cannot create ${dir}: ${String(mk.stderr ?? '').trim()}`, { details: { field: `recipe.files.${path}`, step } });
          }
          await call('fs.write', { path, content });
          q.push({ type: 'exit', step, code: 0, timedOut: false });
        }
        for (const [i, command] of r.run.entries()) {
          step++;
          q.push({ type: 'step', step, kind: 'run', command });
          const out: Uint8Array[] = [];
          const err: Uint8Array[] = [];
          const thisStep = step;
          const untap = s.tap(sid, (ev) => {
            if (ev.type === 'exit') return;
            (ev.type === 'stdout' ? out : err).push(ev.data);
            q.push({ type: ev.type, step: thisStep, data: ev.data });
          });
          let res: Record<string, unknown>;
          try {
            res = await call('shell.exec', { command, ...(Object.keys(env).length ? { env } : {}) });
          } finally {
            untap();
          }
          const code = res.exitCode as number;
          const timedOut = res.timedOut === true;
          q.push({ type: 'exit', step, code, timedOut });
          if (code !== 0 || timedOut) {
            throw new InvalidArgumentError(`recipe.run.${i} exited with code ${code}${timedOut ? ' (timed out)' : ''}: ${command}`, {
              details: { field: `recipe.run.${i}`, step, exitCode: code, timedOut, stdout: tail(out), stderr: tail(err) },
            });
          }
        }
        q.push({ type: 'capturing' });
        const tpl = await s.capture(sid, {
          name: input.name,
          template: { recipe: r, createdBy: who(p), fromSnapshotId: parent?.id ?? null },
        }, opts);
        await s.terminate(sid).catch(() => undefined);
        sessionId = null;
        await s.audit(p, tenantId, null, 'template.create', 'ok', { name: input.name, snapshotId: tpl.id, steps: step + 1 });
        last = { type: 'done', template: tpl };
      } catch (e) {
        const error = isAppError(e) ? e : new AppError('internal', `template build failed: ${(e as Error).message}`, { cause: e });
        await s.audit(p, tenantId, sessionId, 'template.create', 'error', { name: input.name, code: error.code, message: error.message, ...(step >= 0 ? { step } : {}) }).catch(() => undefined);
        last = { type: 'error', error, ...(step >= 0 ? { step } : {}) };
      } finally {
        // Nothing half-built: the build session (and with it every image it made) goes, before the last line
        // is sent, so a caller that reads `error` finds nothing left.
        if (sessionId) await s.terminate(sessionId).catch(() => undefined);
        building.delete(key);
        if (last) q.push(last);
        q.push({ type: 'end' });
      }
    })();
    try {
      for (;;) {
        const ev = await q.next();
        if (ev.type === 'end') break;
        yield ev;
      }
    } finally {
      await task;
    }
  }

  return {
    async build(p, input, opts = {}) {
      const { tenantId, parent } = await check(p, input);
      building.add(`${tenantId}/${input.name}`);
      await s.audit(p, tenantId, null, 'template.build', 'ok', { name: input.name, from: input.recipe.from ?? null, steps: input.recipe.run.length + Object.keys(input.recipe.files ?? {}).length, env: Object.keys(input.recipe.env ?? {}), egressAllow: input.recipe.egressAllow ?? [] });
      const events = run(p, input, tenantId, parent, opts);
      async function* withStart(): AsyncGenerator<BuildEvent> {
        yield { type: 'started', name: input.name };
        yield* events;
      }
      return withStart();
    },

    async list(p, scope = {}) {
      requireOperator(p);
      const t = await s.tenantFor(p, scope.tenantId);
      return (await s.store.snapshots.list({ tenantId: t })).filter((x) => x.kind === 'template');
    },

    get(p, name, scope = {}) {
      return lookup(p, name, scope.tenantId);
    },

    async delete(p, name, scope = {}) {
      const rec = await lookup(p, name, scope.tenantId);
      // The record goes first, so no new create finds it; creates already restoring finish before the image goes.
      await s.store.snapshots.delete(rec.id);
      await Promise.allSettled([...(restoring.get(rec.id) ?? [])]);
      await s.removeSnapshot(rec);
      await s.audit(p, rec.tenantId, null, 'template.delete', 'ok', { name: rec.name, snapshotId: rec.id });
    },

    async createSession(p, input, opts = {}) {
      requireOperator(p);
      for (const f of ['backend', 'memoryMb', 'diskMb', 'cpus', 'env'] as const) {
        if (input[f] !== undefined) throw new InvalidArgumentError(`${f}: comes from the template; leave it out when template is set`, { details: { field: f } });
      }
      const tenantId = await s.tenantFor(p, input.tenantId);
      const name = input.template as string;
      const rec = typeof name === 'string' && NAME.test(name) ? await find(tenantId, name) : undefined;
      if (!rec) throw new InvalidArgumentError(`template: no template ${JSON.stringify(name)} in this tenant`, { details: { field: 'template' } });
      if (input.objective !== undefined && (typeof input.objective !== 'string' || input.objective.length > 4096)) {
        throw new InvalidArgumentError('objective: a string of at most 4096 characters', { details: { field: 'objective' } });
      }
      const started = s.startFrom(p, rec, {
        objective: input.objective ?? null,
        metadata: input.metadata ?? {},
        ...(input.idleTimeoutS !== undefined ? { idleTimeoutS: input.idleTimeoutS } : {}),
      }, opts);
      const set = restoring.get(rec.id) ?? new Set();
      restoring.set(rec.id, set);
      set.add(started);
      try {
        return await started;
      } finally {
        set.delete(started);
        if (set.size === 0) restoring.delete(rec.id);
      }
    },
  };
}

/** The recipe field a step number names: files come first, then run. */
function stepField(r: TemplateRecipe, step: number): string {
  const files = Object.keys(r.files ?? {});
  return step < files.length ? `recipe.files.${files[step]}` : `recipe.run.${step - files.length}`;
}
