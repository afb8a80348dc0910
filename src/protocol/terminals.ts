/**
 * Wire types and schemas of terminals (issue 9 §2). A terminal is reached through a WebSocket:
 * `GET /v1/sessions/:id/terminals` (create, query TerminalCreateQuerySchema) or `…/terminals/:termId`
 * (attach). Binary frames carry bytes (typed, or shown); text frames carry JSON control
 * (TerminalClientMessage up, TerminalServerMessage down). Auth: `Authorization: Bearer`, or `?ticket=` from
 * POST …/terminals/:termId/tickets (single use, 60 s) for browsers, which cannot set WebSocket headers.
 */
import * as z from 'zod';
import { AbsolutePath, EnvRecord } from './schemas.js';
import { iso } from './views.js';

export interface TerminalView {
  termId: string;
  pid: number;
  argv: string[];
  state: 'running' | 'exited';
  exitCode: number | null;
  signal: number | null;
  startedAt: string;
  endedAt: string | null;
  /** Bytes the terminal has shown since it started (the sandbox keeps the last 1 MiB). */
  outputBytes: number;
  cols: number;
  rows: number;
  /** Client id holding input (null: nobody); others only watch. */
  controller: string | null;
  /** Clients attached through this server. */
  clients: number;
}
export interface TerminalListView {
  terminals: TerminalView[];
}
export interface TerminalKillView {
  termId: string;
  signal: number;
  signalled: boolean;
}
export interface TerminalTicketView {
  ticket: string;
  expiresAt: string;
}

/** What the engine reports, as the wire shows it. */
export function toTerminalView(t: {
  execId: string; pid: number; argv: string[]; state: 'running' | 'exited'; exit: { code: number; signal: number | null } | null;
  startedAt: number; endedAt: number | null; stdoutBytes: number; cols: number; rows: number; controller: string | null; clients: number;
}): TerminalView {
  return {
    termId: t.execId,
    pid: t.pid,
    argv: [...t.argv],
    state: t.state,
    exitCode: t.exit?.code ?? null,
    signal: t.exit?.signal ?? null,
    startedAt: iso(t.startedAt),
    endedAt: t.endedAt === null ? null : iso(t.endedAt),
    outputBytes: t.stdoutBytes,
    cols: t.cols,
    rows: t.rows,
    controller: t.controller,
    clients: t.clients,
  };
}

const Size = z.number().int().min(1).max(1000);
const Command = z.array(z.string().max(64 * 1024)).max(1024);

/** POST /v1/sessions/:id/terminals (JSON create, for clients that attach later by id). */
export const TerminalCreateBodySchema = z.strictObject({
  cols: Size.optional().describe('default 80'),
  rows: Size.optional().describe('default 24'),
  cwd: AbsolutePath.optional(),
  env: EnvRecord.optional().describe('merged over the session env; TERM defaults to xterm-256color'),
  command: Command.optional().describe("argv; default: the user's login shell"),
});
export type TerminalCreateBody = z.output<typeof TerminalCreateBodySchema>;

const qSize = z.string().regex(/^\d{1,4}$/, { error: 'must be an integer from 1 to 1000' }).transform(Number).pipe(Size);

/** Query of the WebSocket create (`GET …/terminals` with Upgrade): `command` is a JSON array of strings. */
export const TerminalCreateQuerySchema = z.object({
  cols: qSize.optional(),
  rows: qSize.optional(),
  cwd: AbsolutePath.optional(),
  command: z.string().transform((s, ctx) => {
    try {
      return Command.parse(JSON.parse(s));
    } catch {
      ctx.addIssue({ code: 'custom', message: 'must be a JSON array of strings' });
      return z.NEVER;
    }
  }).optional(),
  /** K=V items, repeated. */
  env: z.array(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*=/, { error: 'must be NAME=value' })).optional(),
  mode: z.enum(['control', 'watch']).optional(),
  ticket: z.string().optional(),
});

/** Query of the attach WebSocket. `mode` watch never takes input; control (default) takes it when free. */
export const TerminalAttachQuerySchema = z.object({
  mode: z.enum(['control', 'watch']).optional(),
  ticket: z.string().optional(),
});

export const TerminalKillBodySchema = z.strictObject({ signal: z.number().int().min(0).max(64).optional().describe('default 15 (SIGTERM); 9 for a shell that ignores it') });

/** Text frames a client sends. */
export type TerminalClientMessage = { type: 'resize'; cols: number; rows: number } | { type: 'control' };
export const TerminalClientMessageSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('resize'), cols: Size, rows: Size }),
  z.strictObject({ type: z.literal('control') }),
]);

/** Text frames the server sends. After `exit` the socket closes (code 1000). */
export type TerminalServerMessage =
  | { type: 'hello'; termId: string; clientId: string; role: 'controller' | 'watcher'; cols: number; rows: number; leaseHolder: string | null }
  /** Input moved, or the session's control lease started (leaseHolder: who holds it) or ended (null). */
  | { type: 'role'; role: 'controller' | 'watcher'; leaseHolder: string | null }
  | { type: 'resize'; cols: number; rows: number }
  | { type: 'exit'; code: number; signal: number | null }
  | { type: 'error'; error: { code: string; message: string; details?: Record<string, unknown> } };

/** WebSocket close codes beyond the standard ones. */
export const TERMINAL_CLOSE = {
  /** The terminal ended; an `exit` message came first. */
  exit: 1000,
  /** The server lost the terminal's stream (session hibernated, server stopping): attach again. */
  detached: 4001,
  /** The session was terminated. */
  closed: 4002,
} as const;

export const ASCIICAST = 'application/x-asciicast';

// ---- view schemas (checked against the types above in the test) ----
const Iso = z.string().describe('ISO-8601 time');
export const TerminalViewSchema = z.strictObject({
  termId: z.string(),
  pid: z.number().int(),
  argv: z.array(z.string()),
  state: z.enum(['running', 'exited']),
  exitCode: z.number().int().nullable(),
  signal: z.number().int().nullable(),
  startedAt: Iso,
  endedAt: Iso.nullable(),
  outputBytes: z.number().int(),
  cols: z.number().int(),
  rows: z.number().int(),
  controller: z.string().nullable().describe('client id holding input'),
  clients: z.number().int(),
});
export const TerminalListViewSchema = z.strictObject({ terminals: z.array(TerminalViewSchema) });
export const TerminalKillViewSchema = z.strictObject({ termId: z.string(), signal: z.number().int(), signalled: z.boolean() });
export const TerminalTicketViewSchema = z.strictObject({ ticket: z.string(), expiresAt: Iso });

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Out<S extends z.ZodType> = z.output<S>;
const _views: [
  Same<Out<typeof TerminalViewSchema>, TerminalView>,
  Same<Out<typeof TerminalListViewSchema>, TerminalListView>,
  Same<Out<typeof TerminalKillViewSchema>, TerminalKillView>,
  Same<Out<typeof TerminalTicketViewSchema>, TerminalTicketView>,
] = [true, true, true, true];
void _views;
