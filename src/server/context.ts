/** What every route sees: the Hono env type, and the few helpers that turn a request into engine input. */
import type { Context } from 'hono';
import type * as z from 'zod';
import { AppError, InvalidArgumentError, NotFoundError, isId, type Clock, type IdKind, type Principal } from '../core/index.js';
import type { Engine } from '../engine/api.js';
import { LIMITS, parseInput } from '../protocol/index.js';
import type { Logger } from './log.js';

export type Env = {
  Variables: {
    principal: Principal;
    requestId: string;
    /** Set for requests through a console session (console-auth.ts). */
    consoleHandle?: string;
    /** Set when an Idempotency-Key answered from what a first attempt did (server/idempotency.ts). */
    idempotency?: 'replayed' | 'recovered';
    /** The body, when a middleware had to read it first (server/idempotency.ts): readJson reads this. */
    bodyText?: string;
    /** A JSON answer's text as sent (jsonAnswer), so a middleware can keep it without copying the response. */
    answerText?: string;
  };
};
export type Ctx = Context<Env, any>;

export interface RouteDeps {
  engine: Engine;
  log: Logger;
  clock: Clock;
  /** Idle exec streams carry a ping line this often, ms. */
  execHeartbeatMs: number;
}

export function principal(c: Ctx): Principal {
  return c.get('principal');
}

/** Call options for the engine: the request's signal aborts when the client goes away. */
export function callOpts(c: Ctx): { signal: AbortSignal } {
  return { signal: c.req.raw.signal };
}

/** A path parameter that must be an id of `kind`; anything else cannot exist, so it is a 404. */
export function idParam(c: Ctx, kind: IdKind, name = 'id'): string {
  const v = c.req.param(name) ?? '';
  if (!isId(kind, v)) throw new NotFoundError(kind, v);
  return v;
}

export function readQuery<S extends z.ZodType>(c: Ctx, schema: S): z.output<S> {
  return parseInput(schema, c.req.query(), 'query');
}

/**
 * Reads a JSON body (at most LIMITS.jsonBodyBytes) and validates it. An empty body counts as `{}`, so
 * verbs whose fields are all optional may be called without one.
 */
export async function readJson<S extends z.ZodType>(c: Ctx, schema: S): Promise<z.output<S>> {
  const text = c.get('bodyText') ?? (await readBodyText(c.req.raw, LIMITS.jsonBodyBytes));
  let value: unknown = {};
  if (text.trim() !== '') {
    try {
      value = JSON.parse(text);
    } catch (e) {
      throw new InvalidArgumentError(`body: malformed JSON (${(e as Error).message})`, { details: { field: 'body' } });
    }
  }
  return parseInput(schema, value, 'body');
}

/** The body as UTF-8 text (at most `limit` bytes, default LIMITS.jsonBodyBytes), for non-JSON bodies such as a Cedar policy. */
export async function readText(c: Ctx, limit: number = LIMITS.jsonBodyBytes): Promise<string> {
  const read = c.get('bodyText');
  if (read !== undefined && Buffer.byteLength(read) > limit) throw tooLarge(limit);
  return read ?? readBodyText(c.req.raw, limit);
}

/** c.json(value, status), keeping the text sent on the context (answerText) for server/idempotency.ts. */
export function jsonAnswer(c: Ctx, value: unknown, status: 200 | 201 = 200): Response {
  const text = JSON.stringify(value);
  c.set('answerText', text);
  return c.body(text, status, { 'content-type': 'application/json' });
}

async function readBodyText(req: Request, limit: number): Promise<string> {
  const declared = Number(req.headers.get('content-length') ?? NaN);
  if (declared > limit) throw tooLarge(limit);
  if (!req.body) return '';
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const chunk of bodyChunks(req)) {
    total += chunk.byteLength;
    if (total > limit) throw tooLarge(limit);
    chunks.push(chunk);
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(chunks));
  } catch {
    throw new InvalidArgumentError('body: not valid UTF-8', { details: { field: 'body' } });
  }
}

function tooLarge(limit: number): AppError {
  return new AppError('payload_too_large', `body: a JSON body may be at most ${limit} bytes`, { details: { field: 'body', limit } });
}

/**
 * The request body as it arrives, chunk by chunk; never buffered whole. Stopping early (break, throw)
 * cancels the body.
 */
export async function* bodyChunks(req: Request): AsyncGenerator<Uint8Array> {
  if (!req.body) return;
  const reader = req.body.getReader();
  let finished = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        finished = true;
        return;
      }
      if (value.byteLength > 0) yield value;
    }
  } finally {
    if (!finished) await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}
