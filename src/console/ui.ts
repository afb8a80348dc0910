/** preact + htm: the console's whole UI stack (tagged templates, no JSX build step, no CDN). */
export { html } from 'htm/preact';

/** A confirmation for destructive actions; resolves to whether the person confirmed. */
export function confirmAction(text: string): boolean {
  return window.confirm(text);
}
