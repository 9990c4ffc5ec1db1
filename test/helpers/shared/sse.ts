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

/** Reads an SSE response with fetch until `enough` says so, the server ends it, or the time is up. */
export async function readSse(url: string, token: string, enough: (events: SseMessage[]) => boolean = () => false, timeoutMs = 15_000) {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), timeoutMs);
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}` }, signal: ac.signal });
  let text = '';
  let endedByServer = false;
  const events: SseMessage[] = [];
  if (res.headers.get('content-type') === 'text/event-stream') {
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) {
          endedByServer = true;
          break;
        }
        text += dec.decode(value, { stream: true });
        const cut = text.lastIndexOf('\n\n');
        if (cut >= 0) {
          events.push(...parseSse(text.slice(0, cut + 2)));
          text = text.slice(cut + 2);
        }
        if (enough(events)) break;
      }
    } catch (err) {
      if ((err as Error).name !== 'AbortError') throw err;
    } finally {
      clearTimeout(timer);
      ac.abort();
    }
  } else {
    text = await res.text();
    clearTimeout(timer);
  }
  return { status: res.status, headers: res.headers, events, endedByServer, body: text };
}
