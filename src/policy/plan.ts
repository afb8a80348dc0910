/**
 * Plan binding. While a plan is set, every call must be the plan's next step: the same tool, with
 * (canonical) arguments valid against the step's schema. Steps are taken in order. A step marked
 * `repeatable` matches one or more calls: after it is taken it may match again until a later step is.
 * When a call fits both the next step and a repeat of the last one, the plan advances (the repeatable
 * step is then closed); this keeps the plan from getting stuck on overlapping schemas.
 *
 * Functions here are pure: matchPlan returns the next state and the engine persists it once the call is
 * allowed to run (not on ask or deny).
 */
import { InvalidArgumentError, InvalidStateError } from '../core/index.js';
import { deepFreeze } from './freeze.js';
import { compileSchema, runValidator } from './schema.js';
import type { JsonSchema, Plan, PlanState, PlanStep } from './types.js';

const MAX_STEPS = 1000;
const MAX_ID = 128;
const MAX_OBJECTIVE = 10000;
const PLAN_KEYS: ReadonlySet<string> = new Set(['objective', 'steps']);
const STEP_KEYS: ReadonlySet<string> = new Set(['id', 'tool', 'arguments', 'repeatable']);

function bad(field: string, message: string, cause?: unknown): InvalidArgumentError {
  return new InvalidArgumentError(`plan ${field} ${message}`, { details: { field }, cause });
}

/**
 * Checks a plan and returns a frozen copy: an objective, 1..1000 steps with unique non-empty ids, non-empty
 * tool names (known ones, when `knownTools` is given) and argument schemas that compile. Throws
 * InvalidArgumentError naming the bad field.
 */
export function validatePlan(plan: unknown, opts: { knownTools?: Iterable<string> } = {}): Plan {
  if (typeof plan !== 'object' || plan === null || Array.isArray(plan)) throw bad('', 'must be an object {objective, steps}');
  const p = plan as Record<string, unknown>;
  for (const k of Object.keys(p)) if (!PLAN_KEYS.has(k)) throw bad(k, 'is not a plan field');
  if (typeof p.objective !== 'string' || p.objective.trim() === '' || p.objective.length > MAX_OBJECTIVE) {
    throw bad('objective', `must be a non-empty string of at most ${MAX_OBJECTIVE} characters`);
  }
  if (!Array.isArray(p.steps) || p.steps.length === 0 || p.steps.length > MAX_STEPS) {
    throw bad('steps', `must be an array of 1 to ${MAX_STEPS} steps`);
  }
  const known = opts.knownTools ? new Set(opts.knownTools) : null;
  const seen = new Set<string>();
  const steps: PlanStep[] = p.steps.map((raw: unknown, i: number) => {
    const at = `steps[${i}]`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad(at, 'must be an object {id, tool, arguments}');
    const s = raw as Record<string, unknown>;
    for (const k of Object.keys(s)) if (!STEP_KEYS.has(k)) throw bad(`${at}.${k}`, 'is not a step field');
    if (typeof s.id !== 'string' || s.id === '' || s.id.length > MAX_ID) throw bad(`${at}.id`, `must be a non-empty string of at most ${MAX_ID} characters`);
    if (seen.has(s.id)) throw bad(`${at}.id`, `${JSON.stringify(s.id)} is used by two steps`);
    seen.add(s.id);
    if (typeof s.tool !== 'string' || s.tool === '') throw bad(`${at}.tool`, 'must be a non-empty tool name');
    if (known && !known.has(s.tool)) throw bad(`${at}.tool`, `names ${JSON.stringify(s.tool)}, which is not a tool of this session`);
    if (s.repeatable !== undefined && typeof s.repeatable !== 'boolean') throw bad(`${at}.repeatable`, 'must be a boolean');
    compileSchema(s.arguments, `plan ${at}.arguments`);
    const step: PlanStep = { id: s.id, tool: s.tool, arguments: deepFreeze(structuredClone(s.arguments) as JsonSchema) };
    if (s.repeatable === true) step.repeatable = true;
    return Object.freeze(step);
  });
  return Object.freeze({ objective: p.objective, steps: Object.freeze(steps) as PlanStep[] });
}

export function initialPlanState(): PlanState {
  return { cursor: 0, consumed: {} };
}

export type PlanMatch =
  | { ok: true; stepId: string; nextState: PlanState }
  | { ok: false; reason: string; /** Ids of the steps the call could have been. */ expected: string[] };

function assertState(plan: Plan, state: PlanState): void {
  if (!Number.isSafeInteger(state.cursor) || state.cursor < 0 || state.cursor > plan.steps.length) {
    throw new InvalidStateError(`plan state cursor ${String(state.cursor)} is outside 0..${plan.steps.length}`);
  }
}

/** Whether the call fits the step; on a miss, why (for the agent). */
function fits(step: PlanStep, tool: string, args: unknown): { ok: true } | { ok: false; why: string } {
  if (step.tool !== tool) return { ok: false, why: `it calls ${step.tool}, not ${tool}` };
  const c = runValidator(compileSchema(step.arguments, `plan step ${step.id} arguments`), args);
  return c.ok ? c : { ok: false, why: `its arguments must satisfy: ${c.errors.join('; ')}` };
}

function advance(state: PlanState, stepId: string, cursor: number): PlanState {
  return { cursor, consumed: { ...state.consumed, [stepId]: (state.consumed[stepId] ?? 0) + 1 } };
}

/**
 * Matches a call against the plan's next step (and the last step again, when that one is repeatable).
 * Pure: `state` is not changed; on a match the engine persists `nextState` when the call goes ahead.
 */
export function matchPlan(plan: Plan, state: PlanState, tool: string, args: unknown): PlanMatch {
  assertState(plan, state);
  const next = plan.steps[state.cursor];
  const last = state.cursor > 0 ? plan.steps[state.cursor - 1] : undefined;
  const again = last?.repeatable === true ? last : undefined;
  const misses: string[] = [];
  if (next) {
    const f = fits(next, tool, args);
    if (f.ok) return { ok: true, stepId: next.id, nextState: advance(state, next.id, state.cursor + 1) };
    misses.push(`step ${JSON.stringify(next.id)} (${state.cursor + 1} of ${plan.steps.length}): ${f.why}`);
  }
  if (again) {
    const f = fits(again, tool, args);
    if (f.ok) return { ok: true, stepId: again.id, nextState: advance(state, again.id, state.cursor) };
    misses.push(`step ${JSON.stringify(again.id)} again (it is repeatable): ${f.why}`);
  }
  const expected = [next?.id, again?.id].filter((x): x is string => x !== undefined);
  const objective = JSON.stringify(plan.objective.length > 200 ? `${plan.objective.slice(0, 200)}…` : plan.objective);
  if (expected.length === 0) {
    return {
      ok: false,
      expected,
      reason: `the approved plan ${objective} is complete (all ${plan.steps.length} steps taken) and ${tool} is not part of it; nothing more can run until the operator sets a new plan`,
    };
  }
  return {
    ok: false,
    expected,
    reason: `this ${tool} call is not the next step of the approved plan ${objective}, so it was not run. Expected ${misses.join('; or ')}`,
  };
}
