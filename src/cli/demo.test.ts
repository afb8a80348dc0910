/** The demo's scenario data: the example files are the same scenario, and the scripted agent's reading of it holds. */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { defineTool } from '../policy/tools.js';
import { DOCUMENT, INJECTED_COMMAND, INJECTION_TRACE, PLAN, PUBLISH_TOOL, injectedCommand, summarize } from './demo.js';

const EXAMPLE = join(resolve(dirname(fileURLToPath(import.meta.url)), '..', '..'), 'examples', 'plan-then-execute');
const read = (name: string) => readFileSync(join(EXAMPLE, name), 'utf8');

describe('demo scenario', () => {
  it('is the scenario examples/plan-then-execute runs (no drift)', () => {
    expect(read('report.md')).toBe(DOCUMENT);
    expect(JSON.parse(read('plan.json'))).toEqual(PLAN);
    expect(JSON.parse(read('report-publish.tool.json'))).toEqual(PUBLISH_TOOL);
  });

  it('defines a tool the gate accepts, and a plan over the tools the session will have', () => {
    const tool = defineTool(structuredClone(PUBLISH_TOOL));
    expect(tool.risk).toBe('irreversible');
    expect(PLAN.steps.map((s) => s.tool)).toEqual(['fs.read', 'fs.write', PUBLISH_TOOL.name]);
  });

  it('carries an injected instruction the scripted agent finds, and a summary without it', () => {
    expect(injectedCommand(DOCUMENT)).toBe(INJECTED_COMMAND);
    expect(INJECTED_COMMAND).toContain(INJECTION_TRACE);
    const s = summarize(DOCUMENT);
    expect(s).toContain('Revenue grew 12%');
    expect(s).not.toMatch(/IGNORE|cron/);
    expect(injectedCommand('no instructions here')).toBeNull();
  });
});
