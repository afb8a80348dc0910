import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { TimeoutError } from '../../core/index.js';

/**
 * A cross-process lock on a directory path (mkdir is atomic). Image builds take it so that parallel test
 * workers, or a server and a test run, never build the same image twice at once. A lock whose owner pid is
 * gone is taken over.
 */
export async function withDirLock<T>(lockPath: string, fn: () => Promise<T>, opts: { timeoutMs?: number } = {}): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30 * 60_000);
  for (;;) {
    try {
      await mkdir(lockPath);
      await writeFile(`${lockPath}/pid`, String(process.pid));
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      const owner = Number(await readFile(`${lockPath}/pid`, 'utf8').catch(() => '0'));
      if (owner > 0 && !alive(owner)) {
        await rm(lockPath, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadline) throw new TimeoutError(`timed out waiting for lock ${lockPath}`);
      await sleep(250);
    }
  }
  try {
    return await fn();
  } finally {
    await rm(lockPath, { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
