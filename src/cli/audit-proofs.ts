/** `berth audit key | checkpoint | prove | verify`: signed tree heads and proofs (README "Audit proofs"). */
import { readFile } from 'node:fs/promises';
import { parsePublicKey, parseSignedHead, verifyHeadSignature, type SignedHead } from '../core/index.js';
import { UsageError, numberFlag, parse, printJson, println, type VerbContext } from './common.js';

export const PROOF_USAGE = `berth audit key [--json]
       berth audit checkpoint                      (a signed head, one JSON line: berth audit checkpoint >> heads.jsonl)
       berth audit prove SEQ [--tree-size N]       (an inclusion proof, JSON)
       berth audit verify [--checkpoint FILE]... [--public-key FILE] [--json]`;

/** A file of signed heads: one JSON object, a JSON array, or JSON Lines (what `--checkpoint-to FILE` appends). */
export async function readCheckpoints(file: string): Promise<SignedHead[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    throw new UsageError(`--checkpoint ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, PROOF_USAGE);
  }
  let values: unknown[];
  try {
    const t = text.trim();
    values = t.startsWith('[') ? (JSON.parse(t) as unknown[]) : t.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as unknown);
  } catch (e) {
    throw new UsageError(`--checkpoint ${file}: not JSON (${(e as Error).message})`, PROOF_USAGE);
  }
  if (values.length === 0) throw new UsageError(`--checkpoint ${file}: no signed head in it`, PROOF_USAGE);
  return values.map((v, i) => parseSignedHead(v, `${file}[${i}]`));
}

export async function key(ctx: VerbContext): Promise<number> {
  const { values: v } = parse(ctx.argv.slice(1), { json: { type: 'boolean' } }, PROOF_USAGE, { max: 0 });
  const k = await ctx.client().audit.key();
  if (v.json) printJson(ctx.io, k);
  else ctx.io.stdout.write(k.publicKey.endsWith('\n') ? k.publicKey : k.publicKey + '\n');
  return 0;
}

export async function checkpoint(ctx: VerbContext): Promise<number> {
  parse(ctx.argv.slice(1), {}, PROOF_USAGE, { max: 0 });
  println(ctx.io, JSON.stringify(await ctx.client().audit.checkpoint()));
  return 0;
}

export async function prove(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parse(ctx.argv.slice(1), { 'tree-size': { type: 'string' } }, PROOF_USAGE, { min: 1, max: 1 });
  const seq = numberFlag('seq', positionals[0], PROOF_USAGE, true) as number;
  const treeSize = numberFlag('tree-size', v['tree-size'], PROOF_USAGE, true);
  printJson(ctx.io, await ctx.client().audit.prove(seq, treeSize === undefined ? {} : { treeSize }));
  return 0;
}

export async function verify(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parse(
    ctx.argv.slice(1),
    { json: { type: 'boolean' }, checkpoint: { type: 'string', multiple: true }, 'public-key': { type: 'string' } },
    PROOF_USAGE,
  );
  // `--checkpoint a.json b.json` reads both: the shell expands one glob into several words.
  const files = [...(v.checkpoint ?? []), ...positionals];
  if (positionals.length > 0 && (v.checkpoint ?? []).length === 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`, PROOF_USAGE);
  const heads = (await Promise.all(files.map(readCheckpoints))).flat();
  let localBad: number | undefined;
  if (v['public-key'] !== undefined) {
    // Checked here too, with a key the auditor holds: a server whose key was swapped cannot vouch for itself.
    const pub = parsePublicKey(await readFile(v['public-key'], 'utf8').catch((e: Error) => {
      throw new UsageError(`--public-key: ${e.message}`, PROOF_USAGE);
    }));
    localBad = heads.findIndex((h) => !verifyHeadSignature(pub, h));
  }
  const r = await ctx.client().audit.verify(heads.length > 0 ? { checkpoints: heads } : {});
  if (v.json) printJson(ctx.io, r);
  if (localBad !== undefined && localBad >= 0) {
    ctx.io.stderr.write(`berth: checkpoint ${localBad + 1} (tree size ${heads[localBad]!.treeSize}) is not signed by --public-key\n`);
    return 1;
  }
  if (!r.ok) {
    const at = r.firstBadSeq === null ? '' : ` at seq ${r.firstBadSeq}`;
    ctx.io.stderr.write(`berth: audit log fails verification${at} (${r.problem})\n`);
    return 1;
  }
  if (!v.json) {
    const signed = r.tree?.latestSigned?.ok ? `, signed through ${r.tree.latestSigned.treeSize}` : '';
    println(ctx.io, `ok: ${r.entries} entries, head ${r.headHash}, root ${r.tree?.rootHash ?? '-'}${signed}; ${heads.length} checkpoint(s) consistent`);
  }
  return 0;
}
