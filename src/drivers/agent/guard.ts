/**
 * Guards (protocol 2, PROTOCOL.md "Guards"): an operation that runs only if some paths are canonical,
 * checked by the agent in the operation's own round trip. The gate decides on a path as the agent wrote
 * it and runs the call under a guard on that path, so following symlinks costs no round trip of its own;
 * when the path turns out to lead elsewhere nothing ran and the gate decides again on where it leads.
 */
import { PathNotCanonicalError } from '../../core/errors.js';
import { ReplyRoute, V, checkPath, dec, enc, type Route } from './wire.js';

/** What runGuarded needs of the channel. */
export interface GuardHost {
  /** The agent's protocol version (guards from 2). */
  version(): number;
  assertOpen(): void;
  newId(): number;
  addRoute(id: number, r: Route): void;
  release(id: number): void;
  /** Sets the lines sent in front of the next line (undefined: none); returns what was set before. */
  pending(lines: string | undefined): string | undefined;
  realpath(path: string, signal?: AbortSignal): Promise<string>;
}

/**
 * Runs `op` (exec, readFile, writeFile, list or stat: each sends its request before its first await) only
 * if every path is canonical: one guard line per path goes out right in front of the op's request, and the
 * agent runs the request only if every guard held. Rejects with PathNotCanonicalError when one did not
 * (nothing ran). An agent of protocol 1 knows no guards: the paths are resolved first, a round trip each.
 */
export async function runGuarded<T>(h: GuardHost, paths: readonly string[], op: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  if (h.version() < 2) {
    for (const path of paths) {
      const real = await h.realpath(path, signal);
      if (real !== path) throw new PathNotCanonicalError(path, real);
    }
    return op();
  }
  h.assertOpen();
  let lines = '';
  const guards = paths.map((path) => {
    checkPath(path);
    const id = h.newId();
    const route = new ReplyRoute<string>(path, (verb, f) => (verb === V.p ? dec(f[0]).toString('utf8') : undefined));
    h.addRoute(id, route);
    lines += `P ${id} ${enc(path)} g\n`;
    return { id, path, real: route.d.promise.finally(() => h.release(id)) };
  });
  h.pending(lines);
  const result = op();
  if (h.pending(undefined) !== undefined) {
    // op sent nothing (it failed before its request): the guards never went out.
    for (const g of guards) {
      g.real.catch(() => undefined);
      h.release(g.id);
    }
    return result;
  }
  for (const g of guards) {
    const real = await g.real.catch(() => null);
    if (real !== g.path) {
      result.catch(() => undefined); // refused by the agent (ESTALE): nothing ran
      throw new PathNotCanonicalError(g.path, real);
    }
  }
  return result;
}
