/**
 * The app the ports e2e tests run inside a sandbox (python3, standard library only), on 127.0.0.1:port.
 * GET answers with what it saw (path, X-Forwarded-Prefix, Authorization) as JSON; GET …/page is an HTML
 * page with a relative link; POST echoes its body; a WebSocket upgrade gets the handshake, then one frame
 * echoed upper-case.
 */
export function portApp(port: number): string {
  return String.raw`import base64, hashlib, http.server, json
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        if self.headers.get('Upgrade', '').lower() == 'websocket':
            acc = base64.b64encode(hashlib.sha1((self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').encode()).digest()).decode()
            self.send_response(101)
            self.send_header('Upgrade', 'websocket')
            self.send_header('Connection', 'Upgrade')
            self.send_header('Sec-WebSocket-Accept', acc)
            self.end_headers()
            self.wfile.flush()
            b = self.rfile.read(2)
            n = b[1] & 127
            mask = self.rfile.read(4)
            data = bytes(c ^ mask[i % 4] for i, c in enumerate(self.rfile.read(n)))
            out = data.upper()
            self.wfile.write(bytes([0x81, len(out)]) + out)
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path.endswith('/page'):
            body = b'<a href="next">next</a>'
            self.send_response(200)
            self.send_header('Content-Type', 'text/html')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        body = json.dumps({'path': self.path, 'prefix': self.headers.get('X-Forwarded-Prefix'), 'auth': self.headers.get('Authorization')}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        n = int(self.headers.get('Content-Length', '0'))
        body = json.dumps({'path': self.path, 'method': 'POST', 'body': self.rfile.read(n).decode()}).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', ${port}), H).serve_forever()
`;
}
