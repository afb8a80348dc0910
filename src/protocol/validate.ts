import type * as z from 'zod';
import { InvalidArgumentError } from '../core/errors.js';

/** Where the input came from; names the field when the whole value is wrong. */
export type InputSource = 'body' | 'query';

type Issue = z.core.$ZodIssue;

/**
 * Parses input with a schema or throws InvalidArgumentError whose message names the field path
 * ("memoryMb: must be ≥ 64") and whose details carry `field` (dotted path), `path` (array) and every issue.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, source: InputSource = 'body'): z.output<S> {
  const r = schema.safeParse(value, { reportInput: true });
  if (r.success) return r.data;
  const issues = r.error.issues.slice(0, 20).map((i) => describeIssue(i, source));
  const first = issues[0] ?? { field: source, path: [], message: 'is invalid' };
  throw new InvalidArgumentError(`${first.field}: ${first.message}`, {
    details: { field: first.field, path: first.path, source, issues: issues.map(({ field, message }) => ({ field, message })) },
  });
}

interface Described {
  field: string;
  path: (string | number)[];
  message: string;
}

function describeIssue(issue: Issue, source: InputSource): Described {
  let path = issue.path.map((p) => (typeof p === 'symbol' ? String(p) : p));
  if (issue.code === 'unrecognized_keys' && issue.keys[0] !== undefined) path = [...path, issue.keys[0]];
  const field = path.length === 0 ? source : path.join('.');
  return { field, path, message: issueMessage(issue) };
}

const ARTICLE: Record<string, string> = {
  int: 'an integer',
  object: 'an object',
  array: 'an array',
  string: 'a string',
  number: 'a number',
  boolean: 'a boolean',
};

function issueMessage(issue: Issue): string {
  switch (issue.code) {
    case 'invalid_type':
      if (issue.input === undefined && issue.expected !== 'undefined') return 'is required';
      if (issue.expected === 'int' && typeof issue.input === 'number') return 'must be an integer';
      return `must be ${ARTICLE[issue.expected] ?? issue.expected}, not ${kindOf(issue.input)}`;
    case 'too_small': {
      const n = issue.minimum;
      if (issue.origin === 'string') return Number(n) <= 1 ? 'must not be empty' : `must be at least ${n} characters`;
      if (issue.origin === 'array' || issue.origin === 'set') return `must have at least ${n} item${Number(n) === 1 ? '' : 's'}`;
      return `must be ${issue.inclusive === false ? '>' : '≥'} ${n}`;
    }
    case 'too_big': {
      const n = issue.maximum;
      if (issue.origin === 'string') return `must be at most ${n} characters`;
      if (issue.origin === 'array' || issue.origin === 'set') return `must have at most ${n} items`;
      return `must be ${issue.inclusive === false ? '<' : '≤'} ${n}`;
    }
    case 'invalid_value':
      if (isCustom(issue.message)) return issue.message;
      return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'unrecognized_keys':
      return 'unknown field';
    case 'invalid_key': {
      const inner = issue.issues[0];
      if (!inner) return 'invalid key';
      const m = issueMessage(inner);
      return m.startsWith('key ') ? m : `key ${m}`;
    }
    case 'invalid_format':
      if (isCustom(issue.message)) return issue.message;
      if (issue.format === 'regex' && 'pattern' in issue) return `must match ${String(issue.pattern)}`;
      return `must be a valid ${issue.format}`;
    case 'invalid_union':
      return isCustom(issue.message) ? issue.message : 'is not a valid value';
    default:
      return issue.message;
  }
}

/** Zod's own messages start with "Invalid" or "Too"; anything else was written in our schemas. */
function isCustom(message: string | undefined): message is string {
  return !!message && !/^(Invalid|Too )/.test(message);
}

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  const t = typeof v;
  return ARTICLE[t] ?? t;
}
