// The API's one way to the installer's state: its read models and request writers
// (src/state/api-state.ts), and its settings, as decorations every route sees. The ports that
// reach outside the database (container logs, the charts, diagnostics, TLS) are not here: each is
// given, as an option, only to the route plugin that serves it.
import fp from 'fastify-plugin';
import type { Settings } from '../config.ts';
import { readModels, requestWriters, type ApiStateDeps, type ReadModels, type RequestWriters } from '../state/api-state.ts';

declare module 'fastify' {
  interface FastifyInstance {
    reads: ReadModels;
    requests: RequestWriters;
    settings: Settings;
  }
}

export const statePlugin = fp<ApiStateDeps & { settings: Settings }>(
  async (app, { settings, ...state }) => {
    const reads = readModels(state);
    app.decorate('reads', reads);
    app.decorate('requests', requestWriters(state));
    app.decorate('settings', settings);
    app.addHook('onClose', () => reads.close());
  },
  { name: 'installer-state' },
);
