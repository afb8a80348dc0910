/**
 * One server per data directory. Two servers on one directory would both run recovery and adopt (or
 * destroy) each other's sandboxes, so `berth serve` takes `<data>/serve.lock` before it opens anything and
 * a second one exits at once, naming the pid that holds it. The file records the holder's pid and the
 * kernel's start time of that pid, so a lock left by a killed server (SIGKILL, a crash, a reboot that reused
 * the pid) is recognised as stale and taken over.
 */
import { mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AppError } from '../core/index.js';

export const LOCK_FILE = 'serve.lock';

interface Holder {
  pid: number;
  /** Field 22 of /proc/<pid>/stat: when that process started, in clock ticks since boot. */
  start: string;
  since: string;
}

export interface DataDirLock {
  readonly path: string;
  /** Removes the lock file if it is still ours. */
  release(): void;
}

export class DataDirBusyError extends AppError {
  constructor(dataDir: string, holder: Holder) {
    super('conflict', `data directory ${dataDir} is in use by another berth server (pid ${holder.pid}, since ${holder.since}); stop it first or pass another --data`, {
      details: { dataDir, pid: holder.pid },
    });
  }
}

function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function readRaw(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

function parseHolder(raw: string | undefined): Holder | undefined {
  try {
    const h = JSON.parse(raw ?? '') as Holder;
    return Number.isInteger(h.pid) && h.pid > 0 ? h : undefined;
  } catch {
    return undefined; // half written, or by a holder that died at once
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

const alive = (h: Holder) => startTime(h.pid) === h.start;

/** Takes the data directory's lock or throws DataDirBusyError. */
export function lockDataDir(dataDir: string): DataDirLock {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = join(dataDir, LOCK_FILE);
  const me: Holder = { pid: process.pid, start: startTime(process.pid) ?? '', since: new Date().toISOString() };
  const mine = JSON.stringify(me);
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      writeFileSync(file, mine, { flag: 'wx', mode: 0o600 });
      return {
        path: file,
        release() {
          try {
            if (readFileSync(file, 'utf8') === mine) unlinkSync(file);
          } catch {
            // already gone
          }
        },
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const raw = readRaw(file);
    if (raw === undefined) continue;
    const holder = parseHolder(raw);
    if (holder && alive(holder)) throw new DataDirBusyError(dataDir, holder);
    if (!holder && attempt < 3) {
      // Unreadable: perhaps another starter is between creating the file and writing it. Look again.
      sleepSync(100);
      continue;
    }
    // Stale (its server is gone): remove it, unless another starter replaced it meanwhile.
    if (readRaw(file) !== raw) continue;
    try {
      unlinkSync(file);
    } catch {
      // another starter removed it first
    }
  }
  const holder = parseHolder(readRaw(file));
  throw holder ? new DataDirBusyError(dataDir, holder) : new AppError('conflict', `cannot take the lock ${file}`);
}
