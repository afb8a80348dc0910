/**
 * Idempotency-Key (issue 7 §11), Stripe's semantics. A key is scoped to the principal's tenant and one
 * route (method + route template) and kept 24 h. What is guaranteed:
 *
 * - The key is written (`started`) in the store BEFORE the request runs; a second request with it while
 *   the first runs gets 409 `conflict` (retryable).
 * - A request that ran keeps its answer (status + JSON body): a retry gets exactly that answer again. A
 *   request that did not run (refused before the engine did anything: a bad body, not found, a quota,
 *   an outage) frees the key, so a retry runs afresh. "Ran" means it succeeded, created a record, or the
 *   gate decided it (policy_denied, result_invalid).
 * - The engine notes the id of each record it creates (a session, a fork's sessions, a snapshot) on the
 *   key BEFORE it writes the record. So when the server dies mid-request, a retry after the restart finds
 *   what was created and answers with those records as they are now (`recovered`; a session's agent
 *   token is not kept, so it is not in that answer), or, when nothing was created, runs the request
 *   afresh. Never twice.
 * - A tool call interrupted by a crash is answered 409 `conflict` (not retryable, details.state
 *   `interrupted`): whether the tool ran is not known here; the audit log tells.
 * - The same key with another method, path or body: 422 `idempotency_mismatch`.
 *
 * At rest: the row holds SHA-256 of the key, never the key, and the answer (which for a create carries the
 * agent token) encrypted with AES-256-GCM under a key derived from the Idempotency-Key. Whoever reads the
 * database cannot read the answers; only a client presenting the key can have one replayed.
 *
 * A `started` key is judged interrupted when the process that owns it is gone: with SQLite any other
 * process (one server has a data directory at a time); with PostgreSQL, shared by several servers, one
 * whose advisory lock on its name is no longer held (store/postgres/idempotency.ts).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createCipheriv, createDecipheriv, createHash, randomBytes, randomUUID } from 'node:crypto';
import {
  AppError,
  IDEMPOTENCY_TTL_MS,
  InvalidArgumentError,
  canonicalJson,
  sha256Hex,
  type Clock,
  type IdempotencyRecord,
  type Principal,
  type SessionRecord,
  type SnapshotRecord,
  type Store,
  type TransactionOptions,
} from '../core/index.js';

/** Key claims and answers commit without their own fsync (core/store.ts TransactionOptions). */
const DEFERRED: TransactionOptions = Object.freeze({ durability: 'deferred' });
/** 1–255 printable ASCII characters (space to tilde). */
export const IDEMPOTENCY_KEY_RE = /^[\x20-\x7e]{1,255}$/;
/** Expired rows are swept at most this often, ms, on the next key's arrival. */
const SWEEP_EVERY_MS = 60 * 60 * 1000;

export interface IdempotentRequest {
  principal: Principal;
  /** The Idempotency-Key header. */
  key: string;
  /** Method and route template, e.g. `POST /v1/sessions/:session/snapshots`. */
  scope: string;
  method: string;
  /** The concrete path, ids included. */
  path: string;
  /** The request body as sent. */
  body: string;
}

/** A claimed key: the request runs inside `run` and ends with `finish`. */
export interface IdempotencyTicket {
  readonly tenantId: string;
  readonly scope: string;
  /** SHA-256 hex of the client's key: what the row is keyed by. */
  readonly key: string;
  /** AES-256 key for the answer, derived from the client's key (never stored). */
  readonly secret: Buffer;
  /** Ids noted while it ran. */
  readonly created: string[];
}

export type IdempotencyStart =
  | { kind: 'run'; ticket: IdempotencyTicket }
  | { kind: 'replay'; status: number; body: string }
  /** The first attempt died with its server; these are the records it created, as they are now. */
  | { kind: 'recovered'; sessions: SessionRecord[]; snapshots: SnapshotRecord[] };

export interface IdempotencyOptions {
  store: Store;
  clock: Clock;
  /** This engine instance's name on the keys it runs. Default: a random UUID. */
  instanceId?: string;
  log?: (line: string) => void;
}

/** Error codes that mean the request ran and was decided: their answer is kept like a success. */
const DECIDED = new Set(['policy_denied', 'result_invalid']);

export class Idempotency {
  readonly instanceId: string;
  readonly #o: IdempotencyOptions;
  readonly #current = new AsyncLocalStorage<IdempotencyTicket>();
  #lastSweep = -Infinity;
  #hold: Promise<void> | undefined;
  /** Answers being kept after they were sent (finishAfter), by tenant, scope and key hash. */
  readonly #finishing = new Map<string, Promise<void>>();

  constructor(o: IdempotencyOptions) {
    this.#o = o;
    this.instanceId = o.instanceId ?? randomUUID();
  }

  /** Claims the key, or says what to answer instead. Throws 400, 409 or 422 (see the file comment). */
  async begin(r: IdempotentRequest): Promise<IdempotencyStart> {
    if (!IDEMPOTENCY_KEY_RE.test(r.key)) {
      throw new InvalidArgumentError('Idempotency-Key: must be 1-255 printable ASCII characters', { details: { field: 'Idempotency-Key' } });
    }
    const now = this.#o.clock.now();
    this.#sweep(now);
    const tenantId = r.principal.tenantId ?? '';
    const secret = answerKey(tenantId, r.scope, r.key);
    const keyHash = sha256Hex(`berth-idempotency-key\n${r.key}`);
    const ticket = (): IdempotencyTicket => ({ tenantId, scope: r.scope, key: keyHash, secret, created: [] });
    const fingerprint = sha256Hex(`${r.method}\n${r.path}\n${canonicalBody(r.body)}`);
    // An answer of this process still being kept: wait for it, so a quick retry gets the replay.
    await this.#finishing.get(finishingKey(tenantId, r.scope, keyHash));
    const mine: IdempotencyRecord = { tenantId, scope: r.scope, key: keyHash, fingerprint, state: 'started', owner: this.instanceId, created: [], createdAt: now, expiresAt: now + IDEMPOTENCY_TTL_MS };
    const repo = this.#o.store.idempotency;
    // Marks this process alive for other servers on the same database (once; retried after a failure).
    this.#hold ??= repo.holdOwner(this.instanceId).catch((e: unknown) => {
      this.#hold = undefined;
      throw e;
    });
    await this.#hold;
    for (let attempt = 0; attempt < 3; attempt++) {
      // Deferred: the claim reaches the disk with the request's own first durable commit (a gated call's
      // decision, a session's record), which precedes anything it does.
      const found = await this.#o.store.transaction(() => repo.claim(mine, now), DEFERRED);
      if (!found) return { kind: 'run', ticket: ticket() };
      if (found.fingerprint !== fingerprint) {
        throw new AppError('idempotency_mismatch', 'this Idempotency-Key was used with a different request (method, path or body); use a new key', {
          details: { idempotencyKey: r.key },
        });
      }
      if (found.state === 'done') return { kind: 'replay', status: found.status ?? 200, body: open(secret, found.body ?? '') };
      if (found.owner === this.instanceId || (await repo.ownerAlive(found.owner))) {
        throw new AppError('conflict', 'a request with this Idempotency-Key is still in progress; retry later', {
          retryable: true,
          details: { idempotencyKey: r.key, state: 'in_progress' },
        });
      }
      // Started by a server that is gone.
      const recovered = await this.#created(found.created);
      if (recovered.sessions.length + recovered.snapshots.length > 0) return { kind: 'recovered', ...recovered };
      if (!isCreating(r.scope)) {
        throw new AppError('conflict', 'the server stopped while the request with this Idempotency-Key ran; whether it took effect is not known (see the audit log); use a new key to try again', {
          details: { idempotencyKey: r.key, state: 'interrupted' },
        });
      }
      // Nothing was created: run it afresh under this key, unless another retry took it over first.
      if (await repo.takeOver(tenantId, r.scope, keyHash, found.owner, this.instanceId)) {
        return { kind: 'run', ticket: ticket() };
      }
    }
    throw new AppError('conflict', 'a request with this Idempotency-Key is in progress; retry later', { retryable: true, details: { idempotencyKey: r.key, state: 'in_progress' } });
  }

  /** Runs fn with the ticket in scope, so note() called by the engine records onto it. */
  run<T>(ticket: IdempotencyTicket, fn: () => Promise<T>): Promise<T> {
    return this.#current.run(ticket, fn);
  }

  /** Called by the engine with the id of a record it is ABOUT to write; a no-op without a key in scope. */
  async note(id: string): Promise<void> {
    const t = this.#current.getStore();
    if (!t) return;
    t.created.push(id);
    await this.#o.store.idempotency.noteCreated(t.tenantId, t.scope, t.key, this.instanceId, id);
  }

  /**
   * Ends a run: keeps the answer if the request ran (see DECIDED), else frees the key. Never throws: the
   * request's own answer stands. If the store fails here the key stays `started` by this process (a retry
   * is told it is in progress) until a restart, after which a retry gets what was created.
   */
  async finish(t: IdempotencyTicket, answer: { status: number; body: string; code?: string }): Promise<void> {
    try {
      await this.#finish(t, answer);
    } catch (e) {
      this.#o.log?.(`idempotency key not finished: ${(e as Error).message}`);
    }
  }

  /**
   * finish(), once `answer` resolves, off the request's path: the server sends its answer and keeps it
   * afterwards. Until it is kept, a retry with the key that reaches this process waits for it (begin), and
   * one that reaches another server on the same database is told the request is in progress (409,
   * retryable). drain() waits for every one still running.
   */
  finishAfter(t: IdempotencyTicket, answer: Promise<{ status: number; body: string; code?: string }>): void {
    const k = finishingKey(t.tenantId, t.scope, t.key);
    const done = answer
      .then((a) => this.finish(t, a), (e: unknown) => this.finish(t, { status: 500, code: 'internal', body: '' }).then(() => this.#o.log?.(`idempotent answer not read: ${(e as Error).message}`)))
      .finally(() => {
        if (this.#finishing.get(k) === done) this.#finishing.delete(k);
      });
    this.#finishing.set(k, done);
  }

  /** Resolves once every answer handed to finishAfter() is kept (the engine's close calls it). */
  async drain(): Promise<void> {
    while (this.#finishing.size > 0) await Promise.all([...this.#finishing.values()]);
  }

  async #finish(t: IdempotencyTicket, answer: { status: number; body: string; code?: string }): Promise<void> {
    const repo = this.#o.store.idempotency;
    let ran = answer.status < 400 || (answer.code !== undefined && DECIDED.has(answer.code));
    // An id is noted before its record is written: count only the records that exist (a quota refusal
    // after the note created nothing).
    if (!ran && t.created.length > 0) {
      const c = await this.#created(t.created);
      ran = c.sessions.length + c.snapshots.length > 0;
    }
    // Deferred: lost only to a power cut in the next milliseconds, which leaves the key `started` by a server
    // that is gone, and a retry is told the outcome is unknown (or gets what was created): never a second run.
    const { store } = this.#o;
    if (ran) await store.transaction(() => repo.complete(t.tenantId, t.scope, t.key, this.instanceId, { status: answer.status, body: seal(t.secret, answer.body) }), DEFERRED);
    else await store.transaction(() => repo.release(t.tenantId, t.scope, t.key, this.instanceId), DEFERRED);
  }

  async #created(ids: string[]): Promise<{ sessions: SessionRecord[]; snapshots: SnapshotRecord[] }> {
    const sessions: SessionRecord[] = [];
    const snapshots: SnapshotRecord[] = [];
    for (const id of ids) {
      const s = await this.#o.store.sessions.get(id);
      if (s) sessions.push(s);
      const snap = s ? undefined : await this.#o.store.snapshots.get(id);
      if (snap) snapshots.push(snap);
    }
    return { sessions, snapshots };
  }

  #sweep(now: number): void {
    if (now - this.#lastSweep < SWEEP_EVERY_MS) return;
    this.#lastSweep = now;
    void this.#o.store.idempotency.deleteExpired(now).catch((e: unknown) => this.#o.log?.(`idempotency sweep failed: ${(e as Error).message}`));
  }
}

function finishingKey(tenantId: string, scope: string, keyHash: string): string {
  return `${tenantId}\n${scope}\n${keyHash}`;
}

/** Routes whose effect is records we note; a tool call's effect is outside the store. */
function isCreating(scope: string): boolean {
  return !scope.endsWith('/calls');
}

function answerKey(tenantId: string, scope: string, key: string): Buffer {
  return createHash('sha256').update(`berth-idempotency-answer\n${tenantId}\n${scope}\n${key}`).digest();
}

/** `v1.<iv>.<tag>.<ciphertext>`, base64url: AES-256-GCM. */
function seal(secret: Buffer, text: string): string {
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', secret, iv);
  const data = Buffer.concat([c.update(text, 'utf8'), c.final()]);
  return ['v1', iv, c.getAuthTag(), data].map((x) => (typeof x === 'string' ? x : x.toString('base64url'))).join('.');
}

function open(secret: Buffer, sealed: string): string {
  const [v, iv, tag, data] = sealed.split('.');
  if (v !== 'v1' || iv === undefined || tag === undefined || data === undefined) throw new AppError('internal', 'a stored idempotent answer is unreadable');
  const d = createDecipheriv('aes-256-gcm', secret, Buffer.from(iv, 'base64url'));
  d.setAuthTag(Buffer.from(tag, 'base64url'));
  return Buffer.concat([d.update(Buffer.from(data, 'base64url')), d.final()]).toString('utf8');
}

function canonicalBody(body: string): string {
  if (body.trim() === '') return '';
  try {
    return canonicalJson(JSON.parse(body));
  } catch {
    return body;
  }
}
