/**
 * Path arguments, step one of the arguments stage. evaluate() is pure, so it cannot ask the sandbox what a
 * path means. The engine therefore works in two steps:
 *
 *   const { paths } = prepareArgs(tool, rawArgs);            // which arguments are paths
 *   const resolved = { path: await driver.realpath(id, …) } // inside the sandbox, symlinks followed
 *   const args = withCanonicalPaths(rawArgs, resolved);
 *   const out = evaluate({ …, args });                       // refuses non-canonical paths
 *   // run out.decision.args: the checked paths are the ones used.
 *
 * Relative paths are resolved against the session's working directory by the engine before realpath.
 * A symlink swapped in between realpath and the executor's open is the executor's to prevent (open the
 * checked path without following a final symlink).
 */
import { InvalidArgumentError } from '../core/index.js';
import type { ToolDefinition } from './types.js';

export interface PathArg {
  /** Top-level argument name, e.g. 'path' or 'cwd'. */
  arg: string;
  /** The value as the agent gave it. */
  path: string;
}

/** The path arguments of a call that need canonicalizing. Values that are not strings are left to the schema check. */
export function prepareArgs(tool: ToolDefinition | undefined, args: unknown): { paths: PathArg[] } {
  if (!tool?.pathArgs || typeof args !== 'object' || args === null || Array.isArray(args)) return { paths: [] };
  const a = args as Record<string, unknown>;
  const paths: PathArg[] = [];
  for (const arg of tool.pathArgs) {
    const v = a[arg];
    if (typeof v === 'string') paths.push({ arg, path: v });
  }
  return { paths };
}

/** A copy of `args` with the resolved paths put in. Throws when `resolved` holds something that is not a path argument. */
export function withCanonicalPaths(tool: ToolDefinition, args: Record<string, unknown>, resolved: Readonly<Record<string, string>>): Record<string, unknown> {
  const allowed = new Set(tool.pathArgs ?? []);
  const out: Record<string, unknown> = { ...args };
  for (const [k, v] of Object.entries(resolved)) {
    if (!allowed.has(k)) throw new InvalidArgumentError(`${k} is not a path argument of ${tool.name}`, { details: { tool: tool.name, argument: k } });
    out[k] = v;
  }
  return out;
}

/** Absolute, no empty, '.' or '..' segments, no trailing slash (except '/'), no NUL: what realpath returns. */
export function isCanonicalPath(p: string): boolean {
  if (p === '/') return true;
  if (!p.startsWith('/') || p.endsWith('/') || p.includes('\0')) return false;
  const segs = p.split('/');
  for (let i = 1; i < segs.length; i++) {
    const s = segs[i];
    if (s === '' || s === '.' || s === '..') return false;
  }
  return true;
}
