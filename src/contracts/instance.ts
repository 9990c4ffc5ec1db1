// The header naming the process that gave an answer: GET /api/health and the start of a self-update
// send it, and the update overlay compares them (docs/adr/0034-restart-seen-by-instance.md). A random
// id per process, nothing about the build or the host.
export const INSTANCE_HEADER = 'x-installer-instance';
