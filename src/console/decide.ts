/** Pure helpers of the approvals inbox (no DOM, no network): unit-tested in decide.test.ts. */

/** `@id("x") @reason("y")` annotations of the policy text, by id. */
export function policyReasons(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  const re = /((?:@[a-z_]+\s*\(\s*"(?:[^"\\]|\\.)*"\s*\)\s*)+)(?:permit|forbid)/gi;
  for (const m of text.matchAll(re)) {
    const ann = m[1] as string;
    const id = /@id\s*\(\s*"((?:[^"\\]|\\.)*)"/.exec(ann)?.[1];
    const reason = /@reason\s*\(\s*"((?:[^"\\]|\\.)*)"/.exec(ann)?.[1];
    if (id) out[id] = reason ?? '';
  }
  return out;
}

/** Where `value` departs from a plan step's argument schema (the common keywords; enough to point at the field). */
export function departures(schema: unknown, value: unknown, path = 'args'): string[] {
  if (typeof schema !== 'object' || schema === null) return [];
  const s = schema as Record<string, unknown>;
  const out: string[] = [];
  if ('const' in s && JSON.stringify(s.const) !== JSON.stringify(value)) out.push(`${path} must be ${JSON.stringify(s.const)}, is ${JSON.stringify(value)}`);
  if (Array.isArray(s.enum) && !s.enum.some((x) => JSON.stringify(x) === JSON.stringify(value))) out.push(`${path} must be one of ${JSON.stringify(s.enum)}`);
  if (typeof s.pattern === 'string' && typeof value === 'string' && !new RegExp(s.pattern, 'u').test(value)) out.push(`${path} must match /${s.pattern}/, is ${JSON.stringify(value)}`);
  if (typeof s.maxLength === 'number' && typeof value === 'string' && value.length > s.maxLength) out.push(`${path} is longer than ${s.maxLength}`);
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const v = value as Record<string, unknown>;
    for (const r of Array.isArray(s.required) ? (s.required as string[]) : []) if (!(r in v)) out.push(`${path}.${r} is missing`);
    const props = (s.properties ?? {}) as Record<string, unknown>;
    for (const [k, sub] of Object.entries(props)) if (k in v) out.push(...departures(sub, v[k], `${path}.${k}`));
    if (s.additionalProperties === false) for (const k of Object.keys(v)) if (!(k in props)) out.push(`${path}.${k} is not allowed by the step`);
  }
  return out;
}

