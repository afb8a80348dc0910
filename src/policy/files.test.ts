/** The published files match the code, and src/policy keeps to its layer. */
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { schemaToJson, schemaToText } from '@cedar-policy/cedar-wasm/nodejs';
import { describe, expect, it } from 'vitest';
import { BUILTIN_TOOLS } from './builtin-tools.js';
import { cedarSchemaFor } from './cedar-schema.js';
import { DEFAULT_POLICY_TEXT } from './default-policy.js';

const here = dirname(fileURLToPath(import.meta.url));

describe('published files', () => {
  it('default-policy.cedar is DEFAULT_POLICY_TEXT', () => {
    expect(readFileSync(join(here, 'default-policy.cedar'), 'utf8')).toBe(DEFAULT_POLICY_TEXT);
  });

  it('schema.cedarschema is the schema generated for the built-in tools', () => {
    const parsed = schemaToJson(readFileSync(join(here, 'schema.cedarschema'), 'utf8'));
    expect(parsed.type).toBe('success');
    if (parsed.type !== 'success') return;
    const render = (s: Parameters<typeof schemaToText>[0]): string => {
      const r = schemaToText(s);
      if (r.type !== 'success') throw new Error('schemaToText failed');
      return r.text.replaceAll('__cedar::', '');
    };
    expect(render(parsed.json)).toBe(render(cedarSchemaFor(BUILTIN_TOOLS)));
  });
});

describe('layering', () => {
  const sources = readdirSync(here).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'));
  const NO_IO = /^(node:)?(fs|fs\/promises|http|https|net|child_process|dgram|worker_threads|process)$/;

  it.each(sources)('%s imports only src/core, its own folder and npm packages, and no I/O modules', (file) => {
    const text = readFileSync(join(here, file), 'utf8');
    const specs = [...text.matchAll(/^\s*(?:import|export)[^'"]*from\s+'([^']+)'/gm)].map((m) => m[1] as string);
    for (const s of specs) {
      if (s.startsWith('.')) expect(s.startsWith('./') || s.startsWith('../core/'), `${file}: ${s}`).toBe(true);
      else expect(NO_IO.test(s), `${file}: ${s}`).toBe(false);
    }
    expect(/\bDate\.now\(|new Date\(\)|performance\.now\(/.test(text), `${file} reads the clock`).toBe(false);
  });
});
