/** The part of noVNC's RFB client (docs/API.md of @novnc/novnc 1.7) the console uses; the package ships no types. */
declare module '@novnc/novnc' {
  export interface RfbOptions {
    /** Ask the server to keep other clients connected. Default true. */
    shared?: boolean;
    /** WebSocket subprotocols to offer. Default none. */
    wsProtocols?: string[];
  }
  export default class RFB extends EventTarget {
    constructor(target: HTMLElement, urlOrChannel: string | WebSocket, options?: RfbOptions);
    viewOnly: boolean;
    scaleViewport: boolean;
    clipViewport: boolean;
    resizeSession: boolean;
    focusOnClick: boolean;
    showDotCursor: boolean;
    background: string;
    qualityLevel: number;
    compressionLevel: number;
    disconnect(): void;
    focus(options?: FocusOptions): void;
    blur(): void;
  }
}
