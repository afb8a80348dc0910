import { InvalidStateError } from './errors.js';

/**
 * The session lifecycle, written once. Every state change in the engine goes through
 * assertTransition(); nothing else decides which changes are legal.
 */
export const SESSION_STATES = [
  'creating', // sandbox being started
  'running',
  'paused', // processes frozen, memory kept
  'hibernating', // checkpoint being written
  'hibernated', // only the snapshot exists; no RAM or CPU held
  'waking', // snapshot being restored
  'failed', // the sandbox died or could not start; see failureReason
  'terminated', // wiped; terminal
] as const;
export type SessionState = (typeof SESSION_STATES)[number];

export const TRANSITIONS: Record<SessionState, readonly SessionState[]> = {
  creating: ['running', 'failed', 'terminated'],
  running: ['paused', 'hibernating', 'failed', 'terminated'],
  paused: ['running', 'hibernating', 'failed', 'terminated'],
  hibernating: ['hibernated', 'running', 'failed', 'terminated'],
  hibernated: ['waking', 'failed', 'terminated'],
  waking: ['running', 'hibernated', 'failed', 'terminated'],
  failed: ['terminated'],
  terminated: [],
};

export function canTransition(from: SessionState, to: SessionState): boolean {
  return TRANSITIONS[from].includes(to);
}

export function assertTransition(from: SessionState, to: SessionState): void {
  if (!canTransition(from, to)) {
    throw new InvalidStateError(`session cannot go from ${from} to ${to}`, { details: { from, to } });
  }
}

/** States in which a sandbox process exists and holds host resources. */
export const LIVE_STATES: readonly SessionState[] = ['running', 'paused'];
/** States of a session on its way into or out of hibernation: a call that needs the machine wakes it first. */
export const ASLEEP_STATES: readonly SessionState[] = ['hibernating', 'hibernated', 'waking'];
/** States a session list shows unless told otherwise: every one but terminated. */
export const LISTED_STATES: readonly SessionState[] = SESSION_STATES.filter((s) => s !== 'terminated');
/** States a restart must settle (engine/recovery.ts): a machine may exist, or a step was under way. */
export const UNSETTLED_STATES: readonly SessionState[] = ['creating', 'running', 'paused', 'hibernating', 'waking'];

/**
 * The lifecycle verbs: the states each accepts and the state it moves the session to first (through
 * TRANSITIONS). The engine checks a verb here before it touches the machine, so a refusal names the verb
 * and what it needs, the same for every caller.
 */
export const VERBS = {
  pause: { from: ['running'], to: 'paused' },
  resume: { from: ['paused'], to: 'running' },
  hibernate: { from: ['running', 'paused'], to: 'hibernating' },
  wake: { from: ['hibernated'], to: 'waking' },
  snapshot: { from: ['running', 'paused'], to: null },
  capture: { from: ['running'], to: null },
} as const satisfies Record<string, { from: readonly SessionState[]; to: SessionState | null }>;
export type Verb = keyof typeof VERBS;

/** Throws invalid_state unless `verb` applies to a session in `state` (details: state, verb, accepts). */
export function assertVerb(verb: Verb, id: string, state: SessionState, why?: string | null): void {
  const accepts: readonly SessionState[] = VERBS[verb].from;
  if (accepts.includes(state)) return;
  throw new InvalidStateError(`session ${id} is ${state}${why ? ` (${why})` : ''}; ${verb} needs it ${accepts.join(' or ')}`, { details: { state, verb, accepts: [...accepts] } });
}
