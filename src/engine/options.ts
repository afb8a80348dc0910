import { availableParallelism } from 'node:os';
import { BACKENDS, ConfigError, DEFAULT_SCREEN, InvalidArgumentError, SCREEN_LIMITS, isBackendName, type BackendName, type DesktopSettings, type SessionSettings } from '../core/index.js';
import type { CreateSessionInput } from './api.js';

/** Defaults for new sessions. Every value documents its unit. */
export interface SessionDefaults {
  /** MiB. Default 512. */
  memoryMb: number;
  /** cores. Default 1. */
  cpus: number;
  /** seconds; 0 = never hibernate by itself. Default 0. */
  idleTimeoutS: number;
  backend: BackendName;
  /**
   * Smallest memoryMb per backend, MiB: each driver's capabilities.minMemoryMb, which composeEngine fills in
   * from the drivers it wires (a property of the backend, not an operator setting). A backend left out has
   * LIMITS.memoryMb.min, the floor of every backend.
   */
  minMemoryMb?: Readonly<Partial<Record<BackendName, number>>>;
  /**
   * Backends whose session files live in the sandbox's memory (each driver's capabilities.writesInMemory, filled
   * in by composeEngine): their sessions always get `diskMb` (default half the memory). A backend left out writes
   * to a disk: `diskMb` only when asked for, checked by its driver against the image.
   */
  writesInMemory?: Readonly<Partial<Record<BackendName, boolean>>>;
}

export const DEFAULT_SESSION: Readonly<SessionDefaults> = Object.freeze({ memoryMb: 512, cpus: 1, idleTimeoutS: 0, backend: 'gvisor' });

export const LIMITS = Object.freeze({
  memoryMb: { min: 64, max: 16384 },
  diskMb: { min: 16, max: 16384 },
  cpus: { min: 0.1, max: Math.max(1, availableParallelism()) },
  idleTimeoutS: { min: 0, max: 604_800 },
  forkCount: { min: 1, max: 64 },
  envEntries: 128,
});

function num(field: string, v: unknown, lo: number, hi: number, integer: boolean): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
    throw new InvalidArgumentError(`${field}: must be ${integer ? 'an integer' : 'a number'}`, { details: { field } });
  }
  if (v < lo || v > hi) throw new InvalidArgumentError(`${field}: must be between ${lo} and ${hi}`, { details: { field, min: lo, max: hi } });
  return v;
}

/** Resolves a create request against the defaults; throws on anything out of range (never corrects). */
export function resolveSettings(input: CreateSessionInput, d: SessionDefaults): { settings: SessionSettings; backend: BackendName } {
  const env = input.env ?? {};
  if (Object.keys(env).length > LIMITS.envEntries) throw new InvalidArgumentError(`env: at most ${LIMITS.envEntries} entries`, { details: { field: 'env' } });
  for (const [k, v] of Object.entries(env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new InvalidArgumentError(`env: invalid variable name ${JSON.stringify(k)}`, { details: { field: `env.${k}` } });
    if (typeof v !== 'string') throw new InvalidArgumentError(`env.${k}: must be a string`, { details: { field: `env.${k}` } });
  }
  const backend = input.backend ?? d.backend;
  if (!isBackendName(backend)) throw new InvalidArgumentError(`backend: must be ${BACKENDS.map((b) => JSON.stringify(b)).join(' or ')}`, { details: { field: 'backend' } });
  const memMin = Math.max(LIMITS.memoryMb.min, d.minMemoryMb?.[backend] ?? 0);
  const memoryMb = num('memoryMb', input.memoryMb ?? d.memoryMb, memMin, LIMITS.memoryMb.max, true);
  return {
    backend,
    settings: {
      memoryMb,
      ...diskSettings(input.diskMb, memoryMb, d.writesInMemory?.[backend] ?? false),
      cpus: num('cpus', input.cpus ?? d.cpus, LIMITS.cpus.min, LIMITS.cpus.max, false),
      idleTimeoutS: num('idleTimeoutS', input.idleTimeoutS ?? d.idleTimeoutS, LIMITS.idleTimeoutS.min, LIMITS.idleTimeoutS.max, true),
      env: { ...env },
      ...desktopSettings(input.desktop),
    },
  };
}

/**
 * Room for the session's writes. Where they live in its memory: default half of memoryMb, at most memoryMb (files
 * and processes share the memory limit; the rest is the processes'). Where they go to a disk (QEMU): none by
 * default (the image's free room); given, the driver grows the machine's disk to it (and refuses less than the
 * image has free).
 */
function diskSettings(v: unknown, memoryMb: number, inMemory: boolean): { diskMb?: number } {
  if (!inMemory) return v === undefined ? {} : { diskMb: num('diskMb', v, LIMITS.diskMb.min, LIMITS.diskMb.max, true) };
  const max = Math.max(LIMITS.diskMb.min, memoryMb);
  if (v !== undefined && typeof v === 'number' && Number.isInteger(v) && v > max) {
    throw new InvalidArgumentError(`diskMb: at most memoryMb (${memoryMb} MiB), since the session's files live in its memory; got ${v}`, { details: { field: 'diskMb', min: LIMITS.diskMb.min, max } });
  }
  return { diskMb: num('diskMb', v ?? Math.max(LIMITS.diskMb.min, Math.floor(memoryMb / 2)), LIMITS.diskMb.min, max, true) };
}

/** `desktop: true` is the default screen; an object gives its size. Out of range: invalid_argument. */
function desktopSettings(v: CreateSessionInput['desktop']): { desktop?: DesktopSettings } {
  if (v === undefined || v === false) return {};
  if (v === true) return { desktop: { ...DEFAULT_SCREEN } };
  if (typeof v !== 'object' || v === null) throw new InvalidArgumentError('desktop: must be true or {width, height}', { details: { field: 'desktop' } });
  return {
    desktop: {
      width: num('desktop.width', v.width ?? DEFAULT_SCREEN.width, SCREEN_LIMITS.min, SCREEN_LIMITS.maxWidth, true),
      height: num('desktop.height', v.height ?? DEFAULT_SCREEN.height, SCREEN_LIMITS.min, SCREEN_LIMITS.maxHeight, true),
    },
  };
}

/**
 * An engine option that counts or times something: an integer from `min` to `max`, or ConfigError naming the
 * option (never clamped: `forkConcurrency: 0` used to stall a fork forever).
 */
export function intOption(field: string, v: unknown, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw new ConfigError(`${field}: must be an integer from ${min} to ${max}, got ${String(v)}`, { details: { field, min, max } });
  }
  return v;
}

/** Fork branches restored at once: default 4, from 1 to LIMITS.forkCount.max. */
export const resolveForkConcurrency = (v: number | undefined): number => intOption('forkConcurrency', v ?? 4, 1, LIMITS.forkCount.max);
/** How often idle sessions are checked, ms: default 1000; 0 disables the timer; at most a day. */
export const resolveIdleSweepMs = (v: number | undefined): number => intOption('idleSweepMs', v ?? 1000, 0, 86_400_000);

export function validateDefaults(d: SessionDefaults): SessionDefaults {
  try {
    resolveSettings({}, d);
  } catch (e) {
    throw new ConfigError(`invalid session defaults: ${(e as Error).message}`);
  }
  return Object.freeze({ ...d });
}
