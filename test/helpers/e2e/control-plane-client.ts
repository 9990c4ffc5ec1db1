// What the platform's control plane runs to call the installer, as a script for `node -e` inside its
// container: the address, token and certificate fingerprint come from the container's environment
// (INSTALLER_URL, INSTALLER_SERVICE_TOKEN, INSTALLER_TLS_FINGERPRINT256, written by the installer into
// the platform's .env). The TLS handshake is finished and the certificate's SHA-256 fingerprint
// compared with INSTALLER_TLS_FINGERPRINT256 before one byte of the request, the token in it, is sent.
// Arguments: METHOD PATH [BODY] [--anonymous]. Prints one JSON line: {status, body, fingerprint} or {error}.

export const CONTROL_PLANE_CLIENT = String.raw`
const tls = require('node:tls');
const https = require('node:https');
const args = process.argv.slice(1);
const anonymous = args.includes('--anonymous');
const [method, path, body] = args.filter((a) => a !== '--anonymous');
const print = (o) => console.log(JSON.stringify(o));
const url = new URL(path, process.env.INSTALLER_URL);
const pin = process.env.INSTALLER_TLS_FINGERPRINT256;
if (url.protocol !== 'https:' || !pin) {
  print({ error: 'INSTALLER_URL is not https:// or INSTALLER_TLS_FINGERPRINT256 is empty' });
} else {
  const socket = tls.connect({ host: url.hostname, port: Number(url.port || 443), servername: url.hostname, rejectUnauthorized: false });
  socket.on('error', (e) => print({ error: e.code || e.message }));
  socket.once('secureConnect', () => {
    const fingerprint = socket.getPeerX509Certificate().fingerprint256;
    if (fingerprint !== pin) {
      socket.destroy();
      print({ error: 'certificate fingerprint mismatch', fingerprint });
      return;
    }
    const headers = { 'x-actor-user-id': 'user-4711', 'x-actor-email': 'u4711@example.com' };
    if (!anonymous) headers.authorization = 'Bearer ' + process.env.INSTALLER_SERVICE_TOKEN;
    if (body) headers['content-type'] = 'application/json';
    const req = https.request(url, { method, headers, createConnection: () => socket }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => print({ status: res.statusCode, body: text, fingerprint }));
    });
    req.on('error', (e) => print({ error: e.code || e.message }));
    req.end(body);
  });
}
`;

/**
 * The same call in plain HTTP to host:port, the token in its header: prints {refused: true} when the
 * connection is refused, else {closed: true, answer} with whatever came back before the connection ended.
 */
export const PLAIN_HTTP_ATTEMPT = String.raw`
const net = require('node:net');
const [host, port] = process.argv.slice(1);
const socket = net.connect({ host, port: Number(port) });
let answer = '';
let done = false;
const print = (o) => { if (!done) { done = true; console.log(JSON.stringify(o)); } };
socket.on('connect', () => socket.write('GET /api/deployment/status HTTP/1.1\r\nHost: ' + host + '\r\nAuthorization: Bearer ' + process.env.INSTALLER_SERVICE_TOKEN + '\r\nConnection: close\r\n\r\n'));
socket.on('data', (d) => (answer += d));
socket.on('error', (e) => print(e.code === 'ECONNREFUSED' ? { refused: true } : { closed: true, answer, error: e.code }));
socket.on('close', () => print({ closed: true, answer }));
socket.setTimeout(10000, () => { print({ timeout: true, answer }); socket.destroy(); });
`;
