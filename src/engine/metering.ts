import type { ExecEvent, ExecExit, ExecHandle, SandboxStats, SessionRecord, SessionState } from '../core/index.js';

/** Closes the interval spent in the current state and moves the record to `to`. */
export function enterState(r: SessionRecord, to: SessionState, now: number): void {
  const spent = Math.max(0, now - r.stateSince) / 1000;
  r.metering.stateSeconds[r.state] = (r.metering.stateSeconds[r.state] ?? 0) + spent;
  r.state = to;
  r.stateSince = now;
  r.updatedAt = now;
}

/** Folds a sandbox incarnation's final figures into the record (at hibernate, terminate, failure). */
export function foldStats(r: SessionRecord, s: SandboxStats | undefined): void {
  if (!s) return;
  r.metering.cpuSeconds += s.cpuSeconds;
  r.metering.peakMemoryBytes = Math.max(r.metering.peakMemoryBytes, s.peakMemoryBytes);
}

/**
 * The record with the live incarnation's figures (CPU, peak memory) folded in. The time spent so far in the
 * current state is not added here: the wire view adds it once, at the moment it answers (protocol/views.ts).
 */
export function liveMetering(r: SessionRecord, live: SandboxStats | undefined): SessionRecord {
  const m = structuredClone(r.metering);
  if (live) {
    m.cpuSeconds += live.cpuSeconds;
    m.peakMemoryBytes = Math.max(m.peakMemoryBytes, live.peakMemoryBytes);
  }
  return { ...r, metering: m };
}

/** Wraps an ExecHandle so that the bytes it moves are counted. */
export function meteredExec(h: ExecHandle, count: { in: (n: number) => void; out: (n: number) => void; end: (e: ExecExit | undefined) => void }): ExecHandle {
  let ended = false;
  const finish = (e: ExecExit | undefined) => {
    if (!ended) {
      ended = true;
      count.end(e);
    }
  };
  void h.wait().then(finish, () => finish(undefined));
  return {
    async *[Symbol.asyncIterator](): AsyncIterator<ExecEvent> {
      for await (const ev of h) {
        if (ev.type !== 'exit') count.out(ev.data.byteLength);
        yield ev;
      }
    },
    writeStdin: async (d) => {
      count.in(d.byteLength);
      await h.writeStdin(d);
    },
    closeStdin: () => h.closeStdin(),
    kill: (sig) => h.kill(sig),
    wait: () => h.wait(),
  };
}

/** Counts the bytes of a stream as they pass. */
export async function* countBytes(src: AsyncIterable<Uint8Array>, add: (n: number) => void): AsyncIterable<Uint8Array> {
  for await (const chunk of src) {
    add(chunk.byteLength);
    yield chunk;
  }
}

export interface PendingCounts {
  execCount: number;
  bytesIn: number;
  bytesOut: number;
  egressConnections: number;
  egressRefused: number;
  egressBytesOut: number;
  egressBytesIn: number;
}

const COUNTS: readonly (keyof PendingCounts)[] = ['execCount', 'bytesIn', 'bytesOut', 'egressConnections', 'egressRefused', 'egressBytesOut', 'egressBytesIn'];

/**
 * Counters and activity times gathered in memory between flushes, so the exec and file hot paths do not
 * write to disk. State changes still write at once; a crash loses at most one flush interval of counts.
 */
export class PendingMeter {
  private readonly m = new Map<string, PendingCounts & { lastActivityAt: number }>();

  add(id: string, f: Partial<PendingCounts>, now: number): void {
    const cur = this.m.get(id) ?? { execCount: 0, bytesIn: 0, bytesOut: 0, egressConnections: 0, egressRefused: 0, egressBytesOut: 0, egressBytesIn: 0, lastActivityAt: 0 };
    for (const k of COUNTS) cur[k] += f[k] ?? 0;
    cur.lastActivityAt = now;
    this.m.set(id, cur);
  }

  ids(): string[] {
    return [...this.m.keys()];
  }

  /** Folds pending counts into the record (mutating it) and forgets them. */
  apply(r: SessionRecord): SessionRecord {
    const p = this.m.get(r.id);
    if (p) {
      for (const k of COUNTS) r.metering[k] = (r.metering[k] ?? 0) + p[k];
      r.lastActivityAt = Math.max(r.lastActivityAt, p.lastActivityAt);
      this.m.delete(r.id);
    }
    return r;
  }

  /** The record as it will be after the next flush, without consuming anything. */
  peek(r: SessionRecord): SessionRecord {
    const p = this.m.get(r.id);
    if (!p) return r;
    const metering = { ...r.metering };
    for (const k of COUNTS) metering[k] = (metering[k] ?? 0) + p[k];
    return { ...r, metering, lastActivityAt: Math.max(r.lastActivityAt, p.lastActivityAt) };
  }
}
