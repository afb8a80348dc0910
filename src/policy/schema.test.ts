import { describe, expect, it } from 'vitest';
import { isAppError } from '../core/index.js';
import { BUILTIN_TOOLS, FS_READ, FS_WRITE, HTTP_REQUEST, SHELL_EXEC } from './builtin-tools.js';
import { compileSchema, validateAgainst, validateArgs, validateResult } from './schema.js';
import { compileToolSchemas, defineTool } from './tools.js';

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    return isAppError(e) ? e.code : 'not-an-app-error';
  }
  return undefined;
}

describe('schema checks', () => {
  it('names the failing field', () => {
    const r = validateArgs(FS_READ, { path: 42 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.errors).toContain('/path: must be string');
    const r2 = validateArgs(SHELL_EXEC, { command: 'ls', extra: 1 });
    expect(r2.ok).toBe(false);
    if (!r2.ok) expect(r2.errors.some((e) => e.startsWith('/:') && e.includes('extra'))).toBe(true);
  });

  it('accepts valid arguments and never changes them', () => {
    const args = { command: 'ls', timeoutMs: 5 };
    const copy = structuredClone(args);
    expect(validateArgs(SHELL_EXEC, args).ok).toBe(true);
    expect(args).toEqual(copy);
    // no coercion: a numeric string is not an integer
    expect(validateArgs(SHELL_EXEC, { command: 'ls', timeoutMs: '5' }).ok).toBe(false);
  });

  it('requires exactly one of content and contentBase64 for fs.write', () => {
    expect(validateArgs(FS_WRITE, { path: '/a', content: 'x' }).ok).toBe(true);
    expect(validateArgs(FS_WRITE, { path: '/a', contentBase64: 'eA==' }).ok).toBe(true);
    expect(validateArgs(FS_WRITE, { path: '/a' }).ok).toBe(false);
    expect(validateArgs(FS_WRITE, { path: '/a', content: 'x', contentBase64: 'eA==' }).ok).toBe(false);
  });

  it('checks http.request methods and URLs', () => {
    expect(validateArgs(HTTP_REQUEST, { method: 'GET', url: 'https://example.com/x?y' }).ok).toBe(true);
    expect(validateArgs(HTTP_REQUEST, { method: 'get', url: 'https://example.com' }).ok).toBe(false);
    expect(validateArgs(HTTP_REQUEST, { method: 'GET', url: 'file:///etc/passwd' }).ok).toBe(false);
  });

  it('validates results against the output schema', () => {
    expect(validateResult(SHELL_EXEC, { exitCode: 0, stdout: '', stderr: '', timedOut: false, truncated: false, stdoutBytes: 0, stderrBytes: 0 }).ok).toBe(true);
    const bad = validateResult(SHELL_EXEC, { exitCode: 'zero', stdout: '', stderr: '', timedOut: false, truncated: false, stdoutBytes: 0, stderrBytes: 0 });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.errors).toContain('/exitCode: must be integer');
  });

  it('compiles each distinct schema once, keyed by canonical JSON', () => {
    const a = compileSchema({ type: 'object', properties: { x: { type: 'string' } } }, 'a');
    const b = compileSchema({ properties: { x: { type: 'string' } }, type: 'object' }, 'b');
    expect(a).toBe(b);
  });

  it('refuses schemas that do not compile', () => {
    expect(codeOf(() => compileSchema({ type: 'strnig' }, 'bad'))).toBe('invalid_argument');
    expect(codeOf(() => compileSchema({ type: 'string', minLenght: 1 }, 'typo'))).toBe('invalid_argument');
    expect(codeOf(() => validateAgainst({ $ref: '#/nowhere' }, 1))).toBe('invalid_argument');
  });
});

describe('tool definitions', () => {
  const ok = {
    name: 'acme.deploy',
    description: 'Deploys the site',
    risk: 'irreversible',
    executor: { kind: 'command', argv: ['/usr/local/bin/deploy'] },
    inputSchema: { type: 'object', properties: { env: { type: 'string' } }, required: ['env'] },
    outputSchema: { type: 'object' },
  };

  it("compiles every one of Berth's own tools (defined with deferCompile, so nothing else would at load)", () => {
    for (const t of BUILTIN_TOOLS) expect(() => compileToolSchemas(t), t.name).not.toThrow();
  });

  it('defers only the compile: a deferred definition still refuses a bad schema when it is compiled', () => {
    const bad = defineTool({ ...ok, inputSchema: { type: 'object', properties: { env: { type: 'nonsense' } } } }, { deferCompile: true });
    expect(() => compileToolSchemas(bad)).toThrow(/tool acme.deploy inputSchema is not a valid JSON Schema/);
    expect(() => defineTool({ ...ok, inputSchema: { type: 'object', properties: { env: { type: 'nonsense' } } } })).toThrow(/is not a valid JSON Schema/);
  });

  it('accepts a valid operator tool and freezes it', () => {
    const t = defineTool(ok);
    expect(t.name).toBe('acme.deploy');
    expect(Object.isFrozen(t)).toBe(true);
    expect(Object.isFrozen(t.inputSchema)).toBe(true);
  });

  it('refuses bad definitions with invalid_argument', () => {
    expect(codeOf(() => defineTool({ ...ok, inputSchema: { type: 'object', properties: { env: { type: 'nope' } } } }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, outputSchema: { type: 42 } }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, inputSchema: { type: 'string' } }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, name: 'Bad Name' }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, name: 'write' }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, risk: 'dangerous' }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, executor: { kind: 'command', argv: [] } }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, pathArgs: ['nope'] }))).toBe('invalid_argument');
    expect(codeOf(() => defineTool({ ...ok, surprise: true }))).toBe('invalid_argument');
  });

  it('built-in tools are valid definitions with output schemas', () => {
    expect(BUILTIN_TOOLS.map((t) => t.name).sort()).toEqual(['computer', 'fs.list', 'fs.read', 'fs.write', 'http.request', 'shell.exec']);
    for (const t of BUILTIN_TOOLS) expect(defineTool({ ...t })).toEqual(t);
  });
});
