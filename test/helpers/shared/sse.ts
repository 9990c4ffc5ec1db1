// Parses a server-sent events body into messages.
export interface SseMessage {
  id?: string;
  event?: string;
  data: Record<string, unknown>;
}

export function parseSse(body: string): SseMessage[] {
  const out: SseMessage[] = [];
  for (const block of body.split(/\n\n/)) {
    const m: Partial<SseMessage> & { dataLines: string[] } = { dataLines: [] };
    for (const line of block.split('\n')) {
      if (line.startsWith(':') || !line) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      if (field === 'id') m.id = value;
      else if (field === 'event') m.event = value;
      else if (field === 'data') m.dataLines.push(value);
    }
    if (m.dataLines.length) out.push({ ...(m.id ? { id: m.id } : {}), ...(m.event ? { event: m.event } : {}), data: JSON.parse(m.dataLines.join('\n')) });
  }
  return out;
}
