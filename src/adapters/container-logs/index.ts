// Platform container logs (docs/adr/0007-container-logs.md), one module per concern:
// - service.ts     the ContainerLogs service (ContainerLogsPort): containers, live streams, windows;
// - swarm-service.ts the same port over a Swarm stack's services and tasks, lines named with their node;
// - swarm-directory.ts a stack's services, tasks and nodes, and the names its lines are given;
// - hold-back.ts   live lines of several nodes held briefly to leave in timestamp order;
// - open-logs.ts   opening a log endpoint (container, service, task) into a line source;
// - merge.ts       read-once feeds, and merging line sources in timestamp order;
// - line-source.ts one container's engine connection as a bounded queue of lines;
// - engine-http.ts the log endpoint over the engine's unix socket, chunked framing removed in place;
// - frames.ts      the engine's multiplexed log frames, parsed into timestamped lines;
// - time.ts        engine timestamps, epoch nanoseconds and the engine's since/until form.
// This index exports what the rest of the project uses.
export { ContainerLogs } from './service.ts';
export { SwarmServiceLogs } from './swarm-service.ts';
export { StackDirectory, parseDetails, type RawNode, type RawService, type RawTask } from './swarm-directory.ts';
export { HoldBack } from './hold-back.ts';
export { LineSource } from './line-source.ts';
export { Closer, mergeOrdered } from './merge.ts';
export { placeInOrder } from './merge.ts';
export { ChunkedDecoder, openEngineStream } from './engine-http.ts';
export { LogFrameParser, type FrameOptions, type ParsedLine } from './frames.ts';
export { engineTime, nsToTimestamp, timestampToNs } from './time.ts';
