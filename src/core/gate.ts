/**
 * The gate's persisted state as typed data: a session's plan and its progress, its breaker and the
 * breaker's settings. src/policy computes the next values (planNext, breakerNext) and the engine stores them
 * on the session's gate row (records.ts) as they are, so both sides share these shapes and nothing is cast
 * on the way to or from the store. Everything here is plain JSON; times are milliseconds since the epoch.
 */

/** A JSON Schema (draft-07, as Ajv reads it by default) describing one JSON value. */
export type JsonSchema = Record<string, unknown>;

// ---- plan ----------------------------------------------------------------------------------------------

export interface PlanStep {
  id: string;
  tool: string;
  /** JSON Schema the call's (canonical) arguments must satisfy. */
  arguments: JsonSchema;
  /** May match again and again until a later step is taken. Default false. */
  repeatable?: boolean;
}

export interface Plan {
  objective: string;
  steps: PlanStep[];
}

export interface PlanState {
  /** Index of the first step not yet taken; steps.length when every step has been taken. */
  cursor: number;
  /** How many calls each step (by id) has consumed. */
  consumed: Record<string, number>;
}

// ---- breaker -------------------------------------------------------------------------------------------

/** One name end to end: these are the wire's `breaker.failures` and `breaker.perMinute` and the CLI's --breaker-*. */
export interface BreakerSettings {
  /** Identical calls failing in a row that trip the breaker. Default 10. */
  failures: number;
  /** Calls allowed in any sliding 60 s window; the next one trips the breaker. Default 120. */
  perMinute: number;
}

export type BreakerTrip = 'identical_failures' | 'rate';

export interface BreakerState {
  open: boolean;
  /** When it tripped (ms), null while closed. */
  openedAt: number | null;
  trip: BreakerTrip | null;
  /** Operator-facing explanation of the trip, null while closed. */
  reason: string | null;
  /**
   * Calls of the rate window counted by the second they started in: `[second since the epoch, count]`,
   * oldest first, at most 61 pairs however high `perMinute` is (a record written before this form held
   * `recentCalls`, start times in ms; the engine converts it when it reads the row: normalizeBreakerState).
   */
  callsBySecond: [number, number][];
  /** Call key (tool + args digest) of the current failure streak. */
  streakKey: string | null;
  streakTool: string | null;
  /** Length of the current streak of identical failing calls. */
  streakFailures: number;
}
