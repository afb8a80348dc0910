/**
 * What every streaming route of the agent channel shares (a file read `R`, a process's rings `O`, a watch
 * `Y`): a queue the agent's lines fill and one consumer drains as an async iterable, read credit granted
 * back (`G`) as the consumer pulls, and `A` to make the agent forget the stream when the consumer stops
 * early. A subclass only parses its lines into `push(item)` and `end(error?)`.
 */
import { InvalidStateError, SandboxError, type AppError } from '../../core/errors.js';
import { CHUNK, GRANT_BATCH, V, asBuffer, dec, deferred, failure, num, raceAbort, type Link, type ReplyRoute, type Route } from './wire.js';

export interface StreamRouteOptions {
  /** The stream's id on the channel. */
  id: number;
  link: Link;
  /** Aborting it stops the consumer (and, through cancel, the stream in the agent). */
  signal?: AbortSignal;
  /** What the stream is, for the error when a second consumer tries it ("a file read"). */
  what: string;
  /** Whether the agent sends against credit (R, O): then every GRANT_BATCH items pulled are granted back. */
  credit: boolean;
}

export abstract class StreamRoute<T> implements Route {
  private queue: T[] = [];
  private consumed = 0;
  private wake: (() => void) | null = null;
  private claimed = false;
  protected done = false;
  protected error: AppError | null = null;

  constructor(protected readonly stream: StreamRouteOptions) {}

  abstract onLine(verb: number, rest: Buffer): void;
  /** The stream failed before it opened (or the channel died): rejects whatever the subclass awaits. */
  protected abstract failOpen(err: AppError): void;
  /** Whether an item costs a unit of credit; the default is every item. */
  protected costs(_item: T): boolean {
    return true;
  }

  /** Items waiting for the consumer. */
  protected get queued(): number {
    return this.queue.length;
  }

  protected push(item: T): void {
    this.queue.push(item);
    this.wake?.();
  }

  /** The agent ended the stream (with an error, or cleanly); the id is free again. */
  protected end(error?: AppError | null): void {
    if (error) this.error ??= error;
    this.done = true;
    this.stream.link.release(this.stream.id);
    if (this.error) this.failOpen(this.error);
    this.wake?.();
  }

  onFail(err: AppError): void {
    this.error ??= err;
    this.done = true;
    this.failOpen(err);
    this.wake?.();
  }

  /** Stops the stream early: the agent forgets it (the file is closed; a process or watch is untouched). */
  cancel(): void {
    if (this.done) return;
    this.done = true;
    this.queue = [];
    this.stream.link.release(this.stream.id);
    try {
      this.stream.link.send(`A ${this.stream.id}\n`);
    } catch {
      // the channel is gone, and the agent's side of the stream with it
    }
  }

  /** The items, once: a second consumer is refused. Leaving the loop early cancels the stream. */
  iterable(): AsyncIterable<T> {
    return {
      [Symbol.asyncIterator]: () => {
        if (this.claimed) throw new InvalidStateError(`${this.stream.what} can be consumed only once`);
        this.claimed = true;
        return this.iterate();
      },
    };
  }

  private async *iterate(): AsyncGenerator<T> {
    try {
      for (;;) {
        if (this.queue.length > 0) {
          const item = this.queue.shift() as T;
          if (this.stream.credit && this.costs(item) && !this.done && ++this.consumed >= GRANT_BATCH) {
            this.stream.link.send(`G ${this.stream.id} ${this.consumed}\n`);
            this.consumed = 0;
          }
          yield item;
          continue;
        }
        if (this.error) throw this.error;
        if (this.done) return;
        await raceAbort(new Promise<void>((r) => (this.wake = r)), this.stream.signal);
        this.wake = null;
      }
    } finally {
      this.cancel();
    }
  }
}

/** A file streaming from the agent (`R`): D chunks against credit, then `r 0 <size>` (checked) or an error. */
export class ReadRoute extends StreamRoute<Buffer> {
  readonly opened = deferred<void>();
  private received = 0;

  constructor(private readonly o: { id: number; path: string; link: Link; signal?: AbortSignal }) {
    super({ id: o.id, link: o.link, signal: o.signal, what: 'a file read', credit: true });
  }

  onLine(verb: number, rest: Buffer): void {
    if (verb === V.D && !this.done) {
      const data = dec(rest.toString('latin1'));
      this.received += data.length;
      this.opened.resolve();
      this.push(data);
    } else if (verb === V.r && !this.done) {
      const fields = rest.toString('latin1').split(' ');
      if (fields[0] !== '0') return this.end(failure(fields, this.o.path));
      if (num(fields[1]) !== this.received) return this.end(new SandboxError(`read of ${this.o.path} lost data`));
      this.opened.resolve();
      this.end();
    }
  }

  protected failOpen(err: AppError): void {
    this.opened.reject(err);
  }
}

/**
 * The data of a write whose `W` line is sent (AgentChannel.writeFile): `D` lines under the output's
 * back-pressure, then `F`; on abort or a failing source an `A`, after which the agent has removed the
 * temporary file. Resolves with the bytes written; releases the route.
 */
export async function sendFileData(
  o: { link: Link; id: number; path: string; route: ReplyRoute<number>; data: AsyncIterable<Uint8Array>; closed: () => boolean },
  signal?: AbortSignal,
): Promise<number> {
  const { link, id, route } = o;
  const source = o.data[Symbol.asyncIterator]();
  let sent = 0;
  let sourceDone = false;
  try {
    while (!route.d.settled) {
      const next = await raceAbort(source.next(), signal);
      if (next.done) {
        sourceDone = true;
        break;
      }
      const buf = asBuffer(next.value);
      for (let off = 0; off < buf.length && !route.d.settled; off += CHUNK) {
        const piece = buf.subarray(off, off + CHUNK);
        await link.sendFlow(`D ${id} ${piece.toString('base64')}\n`, signal);
        sent += piece.length;
      }
    }
    if (!route.d.settled) link.send(`F ${id}\n`);
    const written = await raceAbort(route.d.promise, signal);
    if (written !== sent) throw new SandboxError(`write of ${o.path}: sent ${sent} bytes, the agent wrote ${written}`);
    return written;
  } catch (e) {
    if (!route.d.settled && !o.closed()) {
      link.send(`A ${id}\n`);
      await route.d.promise.catch(() => undefined); // the agent has removed the temporary file
    }
    if (!sourceDone) void Promise.resolve(source.return?.()).catch(() => undefined);
    throw e;
  } finally {
    link.release(id);
  }
}
