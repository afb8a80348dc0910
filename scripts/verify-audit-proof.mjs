#!/usr/bin/env node
// Checks a Berth audit inclusion proof (`berth audit prove SEQ > proof.json`) with nothing but the log's
// public key (`berth audit key > audit.pub`) and Node's own crypto: no Berth code, no server.
//
//   node scripts/verify-audit-proof.mjs proof.json audit.pub
//
// Exit 0 and one "ok" line when all of these hold, else exit 1 naming the first that fails:
//   1. head.signature is an Ed25519 signature, by the key in audit.pub, over the UTF-8 bytes
//      "berth-audit-head/1\n" + treeSize + "\n" + rootHash + "\n" + timestamp + "\n";
//   2. entry is canonical JSON (keys sorted, no whitespace, no duplicate key) and its seq is the proof's;
//   3. the RFC 9162 §2.1.3.2 audit path from SHA-256(0x00 || entry) at leafIndex = seq - 1 in a tree of
//      head.treeSize leaves, with interior nodes SHA-256(0x01 || left || right), ends at head.rootHash.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';

const fail = (why) => {
  process.stderr.write(`verify-audit-proof: FAILED: ${why}\n`);
  process.exit(1);
};
const [proofFile, keyFile] = process.argv.slice(2);
if (!proofFile || !keyFile) {
  process.stderr.write('usage: node scripts/verify-audit-proof.mjs PROOF.json PUBLIC_KEY(.pem | base64)\n');
  process.exit(2);
}

let doc;
try {
  doc = JSON.parse(readFileSync(proofFile, 'utf8'));
} catch (e) {
  fail(`${proofFile}: ${e.message}`);
}
if (doc?.format !== 'berth-audit-inclusion/1') fail('not a berth-audit-inclusion/1 document');
const { seq, leafIndex, entry, proof, head } = doc;
if (!Number.isSafeInteger(seq) || leafIndex !== seq - 1 || typeof entry !== 'string' || !Array.isArray(proof) || typeof head !== 'object') fail('malformed document');

// 1. The head's signature.
const keyText = readFileSync(keyFile, 'utf8').trim();
const key = keyText.startsWith('-----BEGIN')
  ? createPublicKey(keyText)
  : createPublicKey({ key: Buffer.concat([Buffer.from('302a300506032b6570032100', 'hex'), Buffer.from(keyText, 'base64')]), format: 'der', type: 'spki' });
const message = Buffer.from(`berth-audit-head/1\n${head.treeSize}\n${head.rootHash}\n${head.timestamp}\n`, 'utf8');
if (!verify(null, message, key, Buffer.from(String(head.signature), 'base64'))) fail('the head is not signed by this key');

// 2. The entry says one thing only: canonical JSON has no duplicate keys and one spelling per value.
const canonical = (v) => {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
};
let parsed;
try {
  parsed = JSON.parse(entry);
} catch (e) {
  fail(`entry is not JSON: ${e.message}`);
}
if (canonical(parsed) !== entry) fail('entry is not canonical JSON (a duplicated key, or re-encoded)');
if (parsed.seq !== seq) fail(`entry has seq ${parsed.seq}, the proof is for ${seq}`);

// 3. The audit path (RFC 9162 §2.1.3.2).
const sha = (...parts) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};
let fn = leafIndex;
let sn = head.treeSize - 1;
if (!(fn >= 0 && fn <= sn)) fail(`leaf ${leafIndex} is not in a tree of ${head.treeSize}`);
let r = sha(Buffer.of(0), Buffer.from(entry, 'utf8'));
for (const hex of proof) {
  const p = Buffer.from(hex, 'hex');
  if (sn === 0) fail('the proof is too long');
  if (fn % 2 === 1 || fn === sn) {
    r = sha(Buffer.of(1), p, r);
    if (fn % 2 === 0) while (fn % 2 === 0 && fn !== 0) [fn, sn] = [fn >> 1, sn >> 1];
  } else {
    r = sha(Buffer.of(1), r, p);
  }
  [fn, sn] = [Math.floor(fn / 2), Math.floor(sn / 2)];
}
if (sn !== 0) fail('the proof is too short');
if (r.toString('hex') !== head.rootHash) fail('the path does not lead to the signed root');

process.stdout.write(`ok: entry ${seq} (${parsed.action}, ${parsed.outcome}) is in the log of ${head.treeSize} entries signed at ${new Date(head.timestamp).toISOString()} by key ${head.keyId}\n`);
