/** Names the console's browser code shares with the server (no zod here: the console bundle imports it). */
/** The custom header every state-changing console request carries (a cross-site form cannot set it). */
export const CONSOLE_CSRF_HEADER = 'x-berth-csrf';
/** A request the console makes on its own (a refresh after a live event): it does not count as activity. */
export const CONSOLE_BACKGROUND_HEADER = 'x-berth-background';
export const CONSOLE_COOKIE = 'berth_console';
