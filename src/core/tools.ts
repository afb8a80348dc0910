/**
 * What a tool call looks like from outside the gate: shared by the engine (which produces it) and the wire
 * protocol (which carries it), so the two cannot drift apart.
 */

export type ToolRisk = 'read' | 'write' | 'irreversible';

/** A tool as an agent sees it (tools list, MCP tools/list). */
export interface ToolView {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown>;
  risk: ToolRisk;
}

/** The gate's stages, in the order a call passes them. */
export type GateStage = 'control' | 'arguments' | 'policy' | 'plan' | 'approval' | 'breaker' | 'result';

/** The public result of a tool call (CLI `berth call --json`, HTTP, MCP). */
export type CallResult =
  | { decision: 'allow'; result: unknown; approvalId?: string }
  | { decision: 'deny'; stage: GateStage; code: string; reason: string; /** The same call may succeed later (human_control). */ retryable?: true }
  | { decision: 'pending'; approvalId: string };
