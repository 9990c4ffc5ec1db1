// Answers GET /api/health as the installer does; closes its listener on SIGTERM.
import http from 'node:http';
const server = http.createServer((req, res) => {
  res.writeHead(req.url === '/api/health' ? 200 : 404, { 'content-type': 'application/json' });
  res.end(req.url === '/api/health' ? '{"status":"ok","db":"up"}' : '{}');
});
server.keepAliveTimeout = 1000;
server.listen(8080);
process.on('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
