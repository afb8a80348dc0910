/** Usage and help text, and "did you mean" suggestions, all generated from the table in commands.ts. */
import { GLOBAL_FLAGS, SPEC, VERB_NAMES, verbSpec, type Command, type Flag, type VerbSpec } from './commands.js';

export function flagPlaceholder(name: string, f: Flag): string {
  if (f.kind === 'choice') return (f.choices ?? []).join('|');
  return f.arg ?? name.toUpperCase();
}

function flagUsage(name: string, f: Flag): string {
  const long = f.short ? `-${f.short}|--${name}` : `--${name}`;
  const s = f.kind === 'bool' ? long : `${long} ${flagPlaceholder(name, f)}`;
  const repeat = f.kind === 'kv' || f.kind === 'list' ? '…' : '';
  return f.required ? `${s}${repeat}` : `[${s}]${repeat}`;
}

/** One usage line: `berth session create [--objective TEXT] … [--json]`. */
export function commandUsage(verb: string, sub: string, c: Command): string {
  const parts = ['berth', verb];
  if (sub) parts.push(sub);
  if (c.args) parts.push(c.args);
  for (const [name, f] of Object.entries(c.flags)) parts.push(flagUsage(name, f));
  if (c.tail) parts.push(c.tail);
  return parts.join(' ');
}

/** Every usage line of a verb, aligned under the first `usage: `. */
export function verbUsage(verb: string, spec: VerbSpec = verbSpec(verb)!): string {
  return Object.entries(spec.commands)
    .map(([sub, c], i) => `${i === 0 ? '' : '       '}${commandUsage(verb, sub, c)}`)
    .join('\n');
}

/** `berth VERB --help`: summary, usage, each subcommand's flags. */
export function verbHelp(verb: string): string {
  const spec = verbSpec(verb)!;
  const out = [`berth ${verb}: ${spec.summary}`, '', `usage: ${verbUsage(verb, spec)}`];
  for (const [sub, c] of Object.entries(spec.commands)) {
    const flags = Object.entries(c.flags);
    if (flags.length === 0 && !c.summary) continue;
    out.push('', `berth ${verb}${sub ? ` ${sub}` : ''}${c.summary ? `: ${c.summary}` : ''}`);
    const w = Math.max(0, ...flags.map(([n, f]) => flagName(n, f).length));
    for (const [n, f] of flags) out.push(`  ${flagName(n, f).padEnd(w)}  ${f.help}${rangeText(f)}${f.required ? ' (required)' : ''}`);
  }
  const aliases = Object.entries(spec.aliases ?? {});
  if (aliases.length) out.push('', `aliases: ${aliases.map(([a, s]) => `${a} = ${s}`).join(', ')}`);
  out.push('', EXIT_TEXT, '');
  return out.join('\n');
}

function flagName(n: string, f: Flag): string {
  const base = f.short ? `-${f.short}, --${n}` : `    --${n}`;
  return f.kind === 'bool' ? base : `${base} ${flagPlaceholder(n, f)}`;
}

function rangeText(f: Flag): string {
  return (f.kind === 'int' || f.kind === 'number') && f.min !== undefined && f.max !== undefined ? ` [${f.min}..${f.max}]` : '';
}

/** The exit statuses, as the README's table has them. */
export const EXIT_CODES: ReadonlyArray<readonly [string, string]> = [
  ['0', 'success (for `call`: allowed)'],
  ['1', 'an error: the server refused or failed (`berth: <code>: <message>`), or it cannot be reached'],
  ['2', 'a usage error: unknown verb, subcommand or flag, a bad or missing value (nothing was sent)'],
  ['3', '`call`: denied by the gate'],
  ['4', '`call`: pending an approval'],
  ['124', '`exec --timeout`: the command was killed for the timeout'],
  ['130', 'interrupted (a second Ctrl-C)'],
  ['N', '`exec`: the command’s own exit status (128+signal when a signal killed it)'],
];
const EXIT_TEXT = `exit status: ${EXIT_CODES.filter(([c]) => c !== 'N').map(([c]) => c).join(', ')} (see berth help); exec: the command's`;

export function topHelp(): string {
  const w = Math.max(...VERB_NAMES.map((k) => k.length));
  const lines = VERB_NAMES.map((k) => `  ${k.padEnd(w)}  ${SPEC[k].summary}`);
  return [
    'usage: berth VERB [ARGS…]     berth VERB --help     berth --version',
    '',
    ...lines,
    '',
    'Environment: BERTH_URL (default http://127.0.0.1:7070), BERTH_TOKEN (else $BERTH_DATA/root.key; BERTH_DATA default ./.berth).',
    '',
    'Exit status:',
    ...EXIT_CODES.map(([c, t]) => `  ${c.padEnd(3)}  ${t}`),
    '',
    `Global flags: ${Object.keys(GLOBAL_FLAGS).map((f) => `--${f}`).join(', ')}`,
    '',
  ].join('\n');
}

/** Levenshtein distance (small strings only). */
function distance(a: string, b: string): number {
  const d = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return d[b.length]!;
}

/** The closest candidate, if it is close enough to be what was meant (or `word` is a prefix of it). */
export function suggest(word: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = c.startsWith(word) && word.length >= 2 ? 0.5 : distance(word, c);
    if (d < bestD) [best, bestD] = [c, d];
  }
  return best !== undefined && bestD <= Math.max(1, Math.floor(word.length / 3)) ? best : undefined;
}

export function didYouMean(word: string, candidates: readonly string[], render = (s: string) => s): string {
  const s = suggest(word, candidates);
  return s === undefined ? '' : `; did you mean ${render(s)}?`;
}
