/**
 * `berth port-forward ID [LOCAL:]REMOTE`: listens on 127.0.0.1:LOCAL (default: REMOTE; 0 picks a free
 * port) and tunnels each connection to REMOTE on loopback inside the session, until Ctrl-C. Like
 * `kubectl port-forward`: a connection refused inside (nothing listening) closes that one connection and
 * is reported on stderr; the forward goes on.
 */
import '../sdk/node.js'; // installs the Node forwarder behind session.ports.forward
import { UsageError, parseCommand, printJson, println, type VerbContext } from './common.js';
import { SPEC } from './commands.js';
import { commandUsage } from './usage.js';

export async function run(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('port-forward', '', ctx.argv);
  const spec = positionals[1]!;
  const m = /^(?:(\d{1,5}):)?(\d{1,5})$/.exec(spec);
  const local = m?.[1] === undefined ? undefined : Number(m[1]);
  const remote = m ? Number(m[2]) : NaN;
  if (!m || remote < 1 || remote > 65535 || (local !== undefined && local > 65535)) {
    throw new UsageError(`expected [LOCAL:]REMOTE with ports from 1 to 65535 (LOCAL may be 0), got ${JSON.stringify(spec)}`, commandUsage('port-forward', '', SPEC['port-forward'].commands['']));
  }
  const s = await ctx.client().sessions.get(positionals[0]!);
  const ac = new AbortController();
  const stop = () => ac.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const fwd = await s.ports.forward(remote, {
      localPort: local ?? remote,
      host: v.address ?? '127.0.0.1',
      signal: ac.signal,
      onError: (e) => ctx.io.stderr.write(`port-forward: ${e.code}: ${e.message}\n`),
    });
    if (v.json) printJson(ctx.io, { address: fwd.address, localPort: fwd.port, remotePort: remote });
    else println(ctx.io, `Forwarding from ${fwd.address} -> ${remote}`);
    await new Promise<void>((r) => ac.signal.addEventListener('abort', () => r(), { once: true }));
    await fwd.close();
    return 0;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}
