import { describe, expect, it } from 'vitest';
import { departures, policyReasons } from './decide.js';

describe('approvals inbox helpers', () => {
  it('names where a call departs from its plan step’s schema, field by field', () => {
    const step = { type: 'object', additionalProperties: false, required: ['target'], properties: { target: { const: 'staging' }, note: { type: 'string', maxLength: 3 } } };
    expect(departures(step, { target: 'staging' })).toEqual([]);
    expect(departures(step, { target: 'prod', note: 'long', extra: 1 })).toEqual([
      'args.target must be "staging", is "prod"',
      'args.note is longer than 3',
      'args.extra is not allowed by the step',
    ]);
    expect(departures(step, {})).toEqual(['args.target is missing']);
    expect(departures({ type: 'object', properties: { p: { pattern: '^/work/' } } }, { p: '/etc/x' })).toEqual(['args.p must match /^/work//, is "/etc/x"']);
  });

  it('reads @id and @reason of every policy, whatever the annotation order', () => {
    const r = policyReasons(`@id("approve-http-unsafe-methods")\n@approval("required")\npermit (principal, action == Action::"http.request", resource);\n@reason("prod needs a person")\n@approval("required")\n@id("approve-prod")\npermit (principal, action, resource);`);
    expect(r['approve-prod']).toBe('prod needs a person');
    expect(r).toHaveProperty('approve-http-unsafe-methods');
  });
});
