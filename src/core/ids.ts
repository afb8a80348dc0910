import { randomBytes } from 'node:crypto';

/** Prefixes make an id's kind visible in logs and let routes reject the wrong kind early. */
export const ID_PREFIX = {
  session: 'ses',
  snapshot: 'snp',
  tenant: 'ten',
  approval: 'apr',
  exec: 'exe',
  token: 'tok',
  terminal: 'trm',
  portLink: 'pln',
  watchLink: 'wlk',
} as const;
export type IdKind = keyof typeof ID_PREFIX;

const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz'; // Crockford base32, lower case

/** 20 random base32 characters = 100 bits: unguessable, so ids may appear in URLs. */
export function newId(kind: IdKind): string {
  const bytes = randomBytes(20);
  let s = '';
  for (const b of bytes) s += ALPHABET[b & 31];
  return `${ID_PREFIX[kind]}_${s}`;
}

const ID_RE = /^[a-z]{3}_[0-9a-hjkmnp-tv-z]{20}$/;
export function isId(kind: IdKind, s: string): boolean {
  return ID_RE.test(s) && s.startsWith(`${ID_PREFIX[kind]}_`);
}

/** 32 hex characters, as /etc/machine-id wants. */
export function newMachineId(): string {
  return randomBytes(16).toString('hex');
}
