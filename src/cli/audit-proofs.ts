/** `berth audit key | checkpoint | prove | verify`: signed tree heads and proofs (README "Audit proofs"). */
import { readFile } from 'node:fs/promises';
import { parsePublicKey, parseSignedHead, verifyHeadSignature, type SignedHead } from '../core/index.js';
import { SPEC } from './commands.js';
import { UsageError, parseCommand, printJson, println, type VerbContext } from './common.js';
import { commandUsage } from './usage.js';

const usageText = (sub: 'verify' | 'prove'): string => commandUsage('audit', sub, SPEC.audit.commands[sub]);

const VERIFY_USAGE = (): string => usageText('verify');

/** A file of signed heads: one JSON object, a JSON array, or JSON Lines (what `--checkpoint-to FILE` appends). */
export async function readCheckpoints(file: string): Promise<SignedHead[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    throw new UsageError(`--checkpoint ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, VERIFY_USAGE());
  }
  let values: unknown[];
  try {
    const t = text.trim();
    values = t.startsWith('[') ? (JSON.parse(t) as unknown[]) : t.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as unknown);
  } catch (e) {
    throw new UsageError(`--checkpoint ${file}: not JSON (${(e as Error).message})`, VERIFY_USAGE());
  }
  if (values.length === 0) throw new UsageError(`--checkpoint ${file}: no signed head in it`, VERIFY_USAGE());
  return values.map((v, i) => parseSignedHead(v, `${file}[${i}]`));
}

export async function key(ctx: VerbContext): Promise<number> {
  const { values: v } = parseCommand('audit', 'key', ctx.argv);
  const k = await ctx.client().audit.key();
  if (v.json) printJson(ctx.io, k);
  else ctx.io.stdout.write(k.publicKey.endsWith('\n') ? k.publicKey : k.publicKey + '\n');
  return 0;
}

export async function checkpoint(ctx: VerbContext): Promise<number> {
  parseCommand('audit', 'checkpoint', ctx.argv);
  println(ctx.io, JSON.stringify(await ctx.client().audit.checkpoint()));
  return 0;
}

export async function prove(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('audit', 'prove', ctx.argv);
  const seq = Number(positionals[0]);
  if (!/^[1-9][0-9]*$/.test(positionals[0] ?? '') || !Number.isSafeInteger(seq)) throw new UsageError(`SEQ: must be a positive integer, got ${JSON.stringify(positionals[0])}`, usageText('prove'));
  const treeSize = v['tree-size'];
  printJson(ctx.io, await ctx.client().audit.prove(seq, treeSize === undefined ? {} : { treeSize }));
  return 0;
}

export async function verify(ctx: VerbContext): Promise<number> {
  const { values: v, positionals } = parseCommand('audit', 'verify', ctx.argv);
  // `--checkpoint a.json b.json` reads both: the shell expands one glob into several words.
  const files = [...(v.checkpoint ?? []), ...positionals];
  if (positionals.length > 0 && (v.checkpoint ?? []).length === 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`, VERIFY_USAGE());
  const heads = (await Promise.all(files.map(readCheckpoints))).flat();
  let localBad: number | undefined;
  if (v['public-key'] !== undefined) {
    // Checked here too, with a key the auditor holds: a server whose key was swapped cannot vouch for itself.
    const pub = parsePublicKey(await readFile(v['public-key'], 'utf8').catch((e: Error) => {
      throw new UsageError(`--public-key: ${e.message}`, VERIFY_USAGE());
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
