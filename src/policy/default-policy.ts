/**
 * The default policy, as text. default-policy.cedar is the same text (a test keeps them equal); read that
 * file for what the policy does. Kept in code because the gate does no I/O.
 */
export const DEFAULT_POLICY_TEXT = String.raw`// Berth default policy: applied to every tenant that has not set its own.
//
// Written against schema.cedarschema (principal Session, action Action::"<tool>" in one of the risk
// groups Action::"read" / "write" / "irreversible", resource Tool::"<tool>", context {args, risk,
// planStep?, hourUtc, callsInSession}). Cedar denies what no permit allows, and a forbid beats any permit.
//
// What it does:
// 1. read tools (fs.read, fs.list) run.
// 2. write tools (fs.write, shell.exec, operator tools of risk write) run, except http.request.
// 3. http.request runs for GET and HEAD; any other method needs an operator's approval.
// 4. irreversible tools always need an operator's approval (@approval("required")).
// 5. A few obviously destructive shell commands are refused, and files under /proc, /sys, /dev and /boot
//    cannot be written.
//
// Rule 5 is a tripwire for honest mistakes, not a security boundary: a string pattern cannot tell what a
// shell will do ("rm -r -f /", a script, "$(…)" all get past it). Isolation comes from the sandbox; use
// plans and approvals to bind an agent more tightly. Paths in context.args are canonical (absolute,
// symlinks resolved inside the sandbox) by the time policy sees them, so path rules cannot be dodged
// with ".." or a symlink.
//
// @reason on a forbid is shown to the agent when the rule refuses a call. @approval("required") on a
// permit parks the call until an operator decides; if any satisfied permit asks for approval, approval is
// required.

@id("permit-read-tools")
permit (principal, action in Action::"read", resource);

@id("permit-write-tools")
permit (principal, action in Action::"write", resource)
unless { action == Action::"http.request" };

@id("permit-http-safe-methods")
permit (principal, action == Action::"http.request", resource)
when { context.args.method == "GET" || context.args.method == "HEAD" };

@id("approve-http-unsafe-methods")
@approval("required")
permit (principal, action == Action::"http.request", resource)
unless { context.args.method == "GET" || context.args.method == "HEAD" };

@id("approve-irreversible-tools")
@approval("required")
permit (principal, action in Action::"irreversible", resource);

@id("forbid-destructive-shell")
@reason("this command would destroy the whole machine (rm -rf of /, ~ or *, mkfs, dd onto a device, a fork bomb); remove or overwrite the specific paths you mean instead")
forbid (principal, action == Action::"shell.exec", resource)
when {
  context.args.command like "*rm -rf /" ||
  context.args.command like "*rm -rf / *" ||
  context.args.command like "*rm -rf /\**" ||
  context.args.command like "*rm -fr /" ||
  context.args.command like "*rm -fr / *" ||
  context.args.command like "*rm -fr /\**" ||
  context.args.command like "*rm -rf ~" ||
  context.args.command like "*rm -rf ~/" ||
  context.args.command like "*rm -rf \*" ||
  context.args.command like "*--no-preserve-root*" ||
  context.args.command like "*mkfs*" ||
  context.args.command like "*dd *of=/dev/*" ||
  context.args.command like "*:(){*"
};

@id("forbid-system-writes")
@reason("files under /proc, /sys, /dev and /boot cannot be written; write inside your working directory instead")
forbid (principal, action == Action::"fs.write", resource)
when {
  context.args.path like "/proc/*" ||
  context.args.path like "/sys/*" ||
  context.args.path like "/dev/*" ||
  context.args.path like "/boot/*"
};

// Examples of tenant rules (not active):
//
// Only during working hours (UTC):
//   forbid (principal, action in Action::"write", resource) unless { context.hourUtc >= 8 && context.hourUtc < 18 };
//
// Sessions tagged team=analytics may only read:
//   forbid (principal, action in Action::"write", resource)
//   when { principal.metadata.hasTag("team") && principal.metadata.getTag("team") == "analytics" };
//
// Writes only inside /work:
//   @reason("fs.write is limited to /work; write under /work instead")
//   forbid (principal, action == Action::"fs.write", resource) unless { context.args.path like "/work/*" };
`;
