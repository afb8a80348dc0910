import { describe, expect, it } from 'vitest';
import type { Principal } from '../core/index.js';
import { TICKET_TTL_MS, TicketStore } from './tickets.js';

const p: Principal = { kind: 'operator', id: 'ten_a', tenantId: 'ten_a' };

describe('TicketStore', () => {
  it('redeems a ticket once, for its target, within its lifetime', () => {
    let now = 1_000;
    const t = new TicketStore(() => now);
    const a = t.issue(p, 'ses_1/desktop', 'cs_1');
    expect(a.ticket).toMatch(/^ttk_[A-Za-z0-9_-]{32}$/);
    expect(a.expiresAt).toBe(1_000 + TICKET_TTL_MS);
    expect(t.redeem(a.ticket, 'ses_1/desktop')).toEqual({ principal: p, via: 'cs_1' });
    expect(t.redeem(a.ticket, 'ses_1/desktop')).toBeNull(); // used

    const b = t.issue(p, 'ses_1/desktop', null);
    expect(t.redeem(b.ticket, 'ses_2/desktop')).toBeNull(); // another target spends it too
    expect(t.redeem(b.ticket, 'ses_1/desktop')).toBeNull();

    const c = t.issue(p, 'ses_1/trm_1', null);
    now += TICKET_TTL_MS;
    expect(t.redeem(c.ticket, 'ses_1/trm_1')).toBeNull(); // expired
    expect(t.redeem('ttk_unknown', 'ses_1/trm_1')).toBeNull();
  });
});
