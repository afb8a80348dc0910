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
