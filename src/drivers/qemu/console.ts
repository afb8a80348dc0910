import { readFile, rename, writeFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { connectUnix } from './host.js';

/** The most of a guest's console kept, in memory and on disk. */
export const CONSOLE_RING_BYTES = 1024 * 1024;

/** How often a changed ring is written out to its file, ms. */
const FLUSH_MS = 1000;

/**
 * The guest's serial console, kept as a capped ring.
 *
 * QEMU serves the console on a unix socket (`-chardev socket,server=on,wait=off`) instead of appending to a
 * file, which a guest could grow without bound (20 MB in 16 s was measured with a plain file chardev).
 * This ring reads the socket, keeps the last CONSOLE_RING_BYTES and replaces `file` with them (tmp +
 * rename) at most once a second and when it closes, so the file never exceeds the cap. While no server is
 * attached (a restart), QEMU drops console output rather than blocking the guest; the next server starts
 * its ring from the file and attaches again.
 */
export class ConsoleRing {
  readonly #file: string;
  #chunks: Buffer[] = [];
  #size = 0;
  #dirty = false;
  #socket: Socket | undefined;
  #timer: NodeJS.Timeout | undefined;
  #writing: Promise<void> = Promise.resolve();

  private constructor(file: string) {
    this.#file = file;
  }

  /** Attaches to QEMU's console socket; the ring starts with what `file` kept from an earlier server. */
  static async attach(socketPath: string, file: string, signal: AbortSignal): Promise<ConsoleRing> {
    const ring = new ConsoleRing(file);
    const kept = await readFile(file).catch(() => undefined);
    if (kept) ring.#push(kept.subarray(Math.max(0, kept.length - CONSOLE_RING_BYTES)), false);
    const socket = await connectUnix(socketPath, signal);
    ring.#socket = socket;
    socket.on('data', (b: Buffer) => ring.#push(b, true));
    socket.on('error', () => undefined);
    socket.on('close', () => void ring.flush());
    ring.#timer = setInterval(() => void ring.flush(), FLUSH_MS);
    ring.#timer.unref();
    return ring;
  }

  #push(b: Buffer, dirty: boolean): void {
    if (b.length === 0) return;
    if (b.length >= CONSOLE_RING_BYTES) {
      this.#chunks = [Buffer.from(b.subarray(b.length - CONSOLE_RING_BYTES))];
      this.#size = CONSOLE_RING_BYTES;
    } else {
      this.#chunks.push(b);
      this.#size += b.length;
      while (this.#size > CONSOLE_RING_BYTES) {
        const first = this.#chunks[0]!;
        const over = this.#size - CONSOLE_RING_BYTES;
        if (first.length <= over) {
          this.#chunks.shift();
          this.#size -= first.length;
        } else {
          this.#chunks[0] = first.subarray(over);
          this.#size -= over;
        }
      }
    }
    if (dirty) this.#dirty = true;
  }

  /** The bytes kept (at most CONSOLE_RING_BYTES). */
  bytes(): Buffer {
    const all = Buffer.concat(this.#chunks);
    this.#chunks = [all];
    return all;
  }

  /** The last `lines` non-empty lines, escape sequences removed, for error messages. */
  tail(lines = 3): string {
    const tailBytes = this.bytes();
    return tailBytes
      .subarray(Math.max(0, tailBytes.length - 64 * 1024))
      .toString('utf8')
      .replace(/\x1b\[[0-9;?]*[A-Za-z]|\x1bc/g, '')
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .slice(-lines)
      .join(' | ');
  }

  /** Writes the ring to its file if it changed; one write at a time. */
  flush(): Promise<void> {
    this.#writing = this.#writing.then(async () => {
      if (!this.#dirty) return;
      this.#dirty = false;
      const tmp = `${this.#file}.tmp`;
      try {
        await writeFile(tmp, this.bytes(), { mode: 0o600 });
        await rename(tmp, this.#file);
      } catch {
        // The sandbox directory is gone (destroyed) or the disk is full: the ring in memory still answers tail().
      }
    });
    return this.#writing;
  }

  /** Detaches from the socket and writes what is kept. */
  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#socket?.destroy();
    await this.flush();
  }
}
