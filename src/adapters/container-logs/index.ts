// Platform container logs (docs/adr/0007-container-logs.md), one module per concern:
// - service.ts     the ContainerLogs service (ContainerLogsPort): containers, live streams, windows;
// - merge.ts       read-once feeds, and merging line sources in timestamp order;
// - line-source.ts one container's engine connection as a bounded queue of lines;
// - engine-http.ts the log endpoint over the engine's unix socket, chunked framing removed in place;
// - frames.ts      the engine's multiplexed log frames, parsed into timestamped lines;
// - time.ts        engine timestamps, epoch nanoseconds and the engine's since/until form.
// This index exports what the rest of the project uses.
export { ContainerLogs } from './service.ts';
export { placeInOrder } from './merge.ts';
export { ChunkedDecoder, openEngineStream } from './engine-http.ts';
export { LogFrameParser, type ParsedLine } from './frames.ts';
export { engineTime, nsToTimestamp, timestampToNs } from './time.ts';
