/**
 * The session's screenshots, kept on the host (issue 11: "the audit keeps each screenshot's digest, and the
 * image, capped, in the session's data"): `<dir>/<sessionId>/shots/<time>-<sha256 prefix>.png` for every
 * screenshot the computer tool returned (the oldest go past MAX_SHOTS or MAX_BYTES), and
 * `<dir>/<sessionId>/approvals/<approvalId>.png` for the screen as it was when a desktop action was parked
 * (with the point it would act on marked). Files are mode 0600; the session's folder goes with it.
 */
import { mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NotFoundError, sha256Hex } from '../core/index.js';
import { decodePng, drawMarker, encodePng } from './png.js';

/** Screenshots kept per session, and their total size, bytes. */
export const MAX_SHOTS = 500;
export const MAX_BYTES = 64 << 20;

export class ScreenshotStore {
  private readonly chains = new Map<string, Promise<void>>();

  constructor(readonly dir: string) {}

  private async put(file: string, png: Buffer): Promise<void> {
    await mkdir(join(file, '..'), { recursive: true, mode: 0o700 });
    const tmp = `${file}.tmp`;
    await writeFile(tmp, png, { mode: 0o600 });
    await rename(tmp, file);
  }

  /** Keeps one screenshot the computer tool returned, then trims the session's oldest past the caps. */
  keep(sessionId: string, png: Buffer, now: number): Promise<void> {
    const prev = this.chains.get(sessionId) ?? Promise.resolve();
    const next = prev.then(async () => {
      const shots = join(this.dir, sessionId, 'shots');
      await this.put(join(shots, `${String(now).padStart(14, '0')}-${sha256Hex(png).slice(0, 16)}.png`), png);
      const names = (await readdir(shots)).filter((n) => n.endsWith('.png')).sort();
      const sizes = await Promise.all(names.map((n) => stat(join(shots, n)).then((s) => s.size, () => 0)));
      let total = sizes.reduce((a, b) => a + b, 0);
      for (let i = 0; i < names.length && (names.length - i > MAX_SHOTS || total > MAX_BYTES); i++) {
        await rm(join(shots, names[i]!), { force: true });
        total -= sizes[i]!;
      }
    });
    const settled = next.catch(() => undefined);
    this.chains.set(sessionId, settled);
    void settled.then(() => {
      if (this.chains.get(sessionId) === settled) this.chains.delete(sessionId);
    });
    return next;
  }

  /** Screenshots kept for the session, oldest first (file names). */
  async list(sessionId: string): Promise<string[]> {
    return (await readdir(join(this.dir, sessionId, 'shots')).catch(() => [] as string[])).filter((n) => n.endsWith('.png')).sort();
  }

  putApproval(sessionId: string, approvalId: string, png: Buffer): Promise<void> {
    return this.put(join(this.dir, sessionId, 'approvals', `${approvalId}.png`), png);
  }

  hasApproval(sessionId: string, approvalId: string): Promise<boolean> {
    return stat(join(this.dir, sessionId, 'approvals', `${approvalId}.png`)).then(() => true, () => false);
  }

  async approval(sessionId: string, approvalId: string): Promise<Buffer> {
    try {
      return await readFile(join(this.dir, sessionId, 'approvals', `${approvalId}.png`));
    } catch {
      throw new NotFoundError('approval screenshot', approvalId);
    }
  }

  /** The session went: its screenshots go with it. */
  async forget(sessionId: string): Promise<void> {
    await this.chains.get(sessionId);
    await rm(join(this.dir, sessionId), { recursive: true, force: true });
  }
}

/** The screenshot with the point a parked action would act on (coordinate, else start_coordinate) marked. */
export function markedScreenshot(png: Buffer, args: unknown): Buffer {
  const a = (typeof args === 'object' && args !== null ? args : {}) as Record<string, unknown>;
  const point = (Array.isArray(a.coordinate) ? a.coordinate : Array.isArray(a.start_coordinate) ? a.start_coordinate : null) as number[] | null;
  if (!point) return png;
  return encodePng(drawMarker(decodePng(png), point[0]!, point[1]!));
}
