/**
 * Every request with its principal (issue 12 §2). The server's one middleware hands each authenticated
 * (or refused) /v1 request to `RequestAudit.handle`, which
 *   - runs the request in a scope that sees every audit entry the engine and the gate append for it, so a
 *     request the engine already audited (exec, file writes, lifecycle steps, every gated tool call) is
 *     not written twice;
 *   - writes one `request` entry for an allowed request the engine did not audit (file reads with their
 *     path and byte count, stdin writes, kills, lists, gets): principal, route, target, outcome;
 *   - folds refusals (status ≥ 400 the engine did not audit: 401, 403, 404 probes, 409, 429 …) into one
 *     `request.refused` entry per principal, reason and minute, with a count and the distinct routes and
 *     targets tried (at most REFUSAL_TARGETS_MAX of them), so a looping client cannot grow the log
 *     without bound;
 *   - while a principal's gated calls are refused by an open breaker, lets at most `refusalsPerSecond`
 *     of its requests a second through; the rest get 429 `rate_limited` before reaching the engine.
 * File contents and stdin bytes are never recorded, only their sizes.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { AppError, type AuditEntry, type AuditInput, type AuditLog, type AuditQuery, type Clock, type Principal } from '../core/index.js';

/** What the server knows of a request once it is answered. */
export interface RequestFacts {
  /** null when the bearer token was missing or not accepted (401). */
  principal: Principal | null;
  method: string;
  /** The path with every id replaced by `:kind`, e.g. `/v1/sessions/:session/files`. */
  route: string;
  /** Ids in the path by kind, and the file `path` of a file route. */
  target: Record<string, string>;
  status: number;
  /** The error code of a refusal. */
  code?: string;
  /** Request body bytes (a file write, stdin), from Content-Length or as counted. */
  bytesIn?: number;
  /** Response body bytes when known (Content-Length). */
  bytesOut?: number;
  requestId: string;
  /** Answered from an earlier request with the same Idempotency-Key, not run again (engine/idempotency.ts). */
  idempotency?: 'replayed' | 'recovered';
}

export interface RequestAuditOptions {
  audit: AuditLog;
  clock: Clock;
  /** Requests a second let through for a principal whose calls meet an open breaker. Default 10. */
  refusalsPerSecond?: number;
  log?: (line: string) => void;
}

/** Distinct (method, route, target) kept in one aggregated refusal entry; the rest are only counted. */
export const REFUSAL_TARGETS_MAX = 64;
/** Default of RequestAuditOptions.refusalsPerSecond. */
export const DEFAULT_REFUSALS_PER_SECOND = 10;
const MINUTE_MS = 60_000;
/** A breaker sighting older than this no longer rate-limits (it is refreshed by every call let through). */
const BREAKER_MEMORY_MS = 5_000;

interface Scope {
  /** Entries appended for this request by the engine or the gate. */
  appended: number;
  /** A gated call of this request was refused by an open breaker. */
  breakerOpen: boolean;
}

interface Pending {
  principal: Principal;
  tenantId: string | null;
  sessionId: string | null;
  reason: string;
  minute: number;
  count: number;
  firstAt: number;
  lastAt: number;
  statuses: Record<string, number>;
  requests: Map<string, { method: string; route: string; target: Record<string, string> }>;
  more: number;
}

const ANONYMOUS: Principal = { kind: 'anonymous', id: 'anonymous', tenantId: null };

function principalKey(p: Principal): string {
  return `${p.kind}:${p.id}`;
}

export class RequestAudit {
  readonly #als = new AsyncLocalStorage<Scope>();
  readonly #o: RequestAuditOptions;
  readonly #perSecond: number;
  readonly #pending = new Map<string, Pending>();
  /** principal → when a gated call of it last met an open breaker. */
  readonly #breaker = new Map<string, number>();
  /** principal → the second and how many requests it let through in it. */
  readonly #window = new Map<string, { second: number; n: number }>();
  #timer: NodeJS.Timeout | undefined;
  /** The log the engine and the gate append to: entries made inside a request scope are counted there. */
  readonly log: AuditLog;

  constructor(o: RequestAuditOptions) {
    this.#o = o;
    this.#perSecond = o.refusalsPerSecond ?? DEFAULT_REFUSALS_PER_SECOND;
    if (!Number.isInteger(this.#perSecond) || this.#perSecond < 1) {
      throw new AppError('config', `refusalsPerSecond: must be a positive integer, got ${this.#perSecond}`);
    }
    const als = this.#als;
    this.log = {
      async append(input: AuditInput): Promise<AuditEntry> {
        const e = await o.audit.append(input);
        const s = als.getStore();
        if (s) {
          s.appended++;
          if (input.action === 'tool.breaker' && input.outcome === 'deny') s.breakerOpen = true;
        }
        return e;
      },
      query: (q?: AuditQuery) => o.audit.query(q),
      scan: () => o.audit.scan(),
    };
  }

  /**
   * Runs one request: authenticates it, refuses it with 429 when its principal is over the rate while a
   * breaker is open, else runs `next` in a scope and then records what the engine did not. `facts` is
   * called once, after the request (with the error when authentication or the rate limit refused it); it
   * may answer with a promise that settles when a streamed body has ended.
   */
  async handle(o: { authenticate: () => Promise<Principal>; next: () => Promise<void>; facts: (p: Principal | null, err?: unknown) => RequestFacts | Promise<RequestFacts> }): Promise<void> {
    let principal: Principal | null = null;
    try {
      principal = await o.authenticate();
      this.#admit(principalKey(principal));
    } catch (e) {
      await this.record(await o.facts(principal, e));
      throw e;
    }
    const key = principalKey(principal);
    const scope: Scope = { appended: 0, breakerOpen: false };
    try {
      await this.#als.run(scope, o.next);
    } finally {
      if (scope.breakerOpen) {
        const now = this.#o.clock.now();
        this.#breaker.set(key, now);
        // The refused call itself counts toward this second's allowance.
        const second = Math.floor(now / 1000);
        if (this.#window.get(key)?.second !== second) this.#window.set(key, { second, n: 1 });
      } else if (scope.appended > 0) this.#breaker.delete(key); // a gated call got past the breaker
      if (scope.appended === 0) {
        const f = o.facts(principal);
        // A streamed file read is recorded when its body ends (with its size); the answer does not wait.
        if (f instanceof Promise) void f.then((x) => this.record(x)).catch((e: unknown) => this.#o.log?.(`request audit failed: ${(e as Error).message}`));
        else await this.record(f);
      }
    }
  }

  /** Throws 429 rate_limited when the principal met an open breaker lately and is over its rate. */
  #admit(key: string): void {
    const seen = this.#breaker.get(key);
    const now = this.#o.clock.now();
    if (seen === undefined) return;
    if (now - seen > BREAKER_MEMORY_MS) {
      this.#breaker.delete(key);
      this.#window.delete(key);
      return;
    }
    const second = Math.floor(now / 1000);
    const w = this.#window.get(key);
    if (!w || w.second !== second) {
      this.#window.set(key, { second, n: 1 });
      return;
    }
    w.n++;
    if (w.n > this.#perSecond) {
      const retryAfterS = 1;
      throw new AppError('rate_limited', `the circuit breaker of this session is open and more than ${this.#perSecond} requests a second were refused; retry after ${retryAfterS}s, or ask an operator to reset the breaker`, {
        retryable: true,
        details: { limit: this.#perSecond, per: 'second', retryAfterS },
      });
    }
  }

  /** Writes (allowed) or folds (refused) one request the engine did not audit. */
  async record(f: RequestFacts): Promise<void> {
    const p = f.principal ?? ANONYMOUS;
    const sessionId = f.target.session ?? (p.kind === 'agent' ? p.id : null);
    const tenantId = p.tenantId ?? f.target.tenant ?? null;
    if (f.status < 400) {
      await this.#o.audit.append({
        tenantId,
        sessionId,
        principal: p,
        action: 'request',
        outcome: 'ok',
        data: {
          requestId: f.requestId,
          method: f.method,
          route: f.route,
          target: f.target,
          status: f.status,
          ...(f.bytesIn !== undefined ? { bytesIn: f.bytesIn } : {}),
          ...(f.bytesOut !== undefined ? { bytesOut: f.bytesOut } : {}),
          ...(f.idempotency !== undefined ? { idempotency: f.idempotency } : {}),
        },
      });
      return;
    }
    const now = this.#o.clock.now();
    const minute = Math.floor(now / MINUTE_MS);
    // A refusal replayed under an Idempotency-Key is its own reason, e.g. `policy_denied:replayed`.
    const reason = `${f.code ?? `http_${f.status}`}${f.idempotency ? `:${f.idempotency}` : ''}`;
    // One entry per principal, reason and minute, whatever ids it tried (they are listed, up to a cap): a
    // probe over many ids must not make many entries. It is filed under the principal's tenant (and an
    // agent's own session), never under the target's.
    const key = `${principalKey(p)}\u0000${reason}`;
    let agg = this.#pending.get(key);
    if (agg && agg.minute !== minute) {
      await this.#write(key, agg);
      agg = undefined;
    }
    if (!agg) {
      agg = { principal: p, tenantId: p.tenantId, sessionId: p.kind === 'agent' ? p.id : null, reason, minute, count: 0, firstAt: now, lastAt: now, statuses: {}, requests: new Map(), more: 0 };
      this.#pending.set(key, agg);
    }
    agg.count++;
    agg.lastAt = now;
    agg.statuses[String(f.status)] = (agg.statuses[String(f.status)] ?? 0) + 1;
    const rk = `${f.method} ${f.route} ${JSON.stringify(f.target)}`;
    if (!agg.requests.has(rk)) {
      if (agg.requests.size < REFUSAL_TARGETS_MAX) agg.requests.set(rk, { method: f.method, route: f.route, target: f.target });
      else agg.more++;
    }
    this.#arm();
  }

  /** Writes the aggregates of minutes that have ended (all of them with `all`). Called by a timer and on close. */
  async flush(all = true): Promise<void> {
    const minute = Math.floor(this.#o.clock.now() / MINUTE_MS);
    for (const [key, agg] of [...this.#pending]) {
      if (all || agg.minute < minute) await this.#write(key, agg);
    }
  }

  async #write(key: string, agg: Pending): Promise<void> {
    this.#pending.delete(key);
    await this.#o.audit.append({
      tenantId: agg.tenantId,
      sessionId: agg.sessionId,
      principal: agg.principal,
      action: 'request.refused',
      outcome: 'deny',
      data: {
        reason: agg.reason,
        count: agg.count,
        minute: new Date(agg.minute * MINUTE_MS).toISOString(),
        firstAt: agg.firstAt,
        lastAt: agg.lastAt,
        statuses: agg.statuses,
        requests: [...agg.requests.values()],
        ...(agg.more > 0 ? { moreTargets: agg.more } : {}),
      },
    });
  }

  #arm(): void {
    if (this.#timer) return;
    const now = this.#o.clock.now();
    const wait = MINUTE_MS - (now % MINUTE_MS) + 50;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.flush(false)
        .catch((e: unknown) => this.#o.log?.(`refusal audit flush failed: ${(e as Error).message}`))
        .finally(() => {
          if (this.#pending.size > 0) this.#arm();
        });
    }, wait).unref();
  }

  async close(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.flush(true);
  }
}
