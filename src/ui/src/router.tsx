// A small history router: the backend answers every non-/api path with index.html, so a reload or
// a shared link to /jobs/<id> opens that page.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

const CHANGE = 'installer:navigate';

export function navigate(to: string, opts: { replace?: boolean } = {}): void {
  if (to === location.pathname + location.search) return;
  if (opts.replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  window.dispatchEvent(new Event(CHANGE));
}

export function useLocation(): { path: string; query: URLSearchParams } {
  const read = () => ({ path: location.pathname, query: new URLSearchParams(location.search) });
  const [loc, setLoc] = useState(read);
  useEffect(() => {
    const on = () => setLoc(read());
    window.addEventListener('popstate', on);
    window.addEventListener(CHANGE, on);
    return () => {
      window.removeEventListener('popstate', on);
      window.removeEventListener(CHANGE, on);
    };
  }, []);
  return loc;
}

/** `/jobs/:id` against `/jobs/123` → `{ id: '123' }`; null when it does not match. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/').filter(Boolean);
  const s = path.split('/').filter(Boolean);
  if (p.length !== s.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    const seg = p[i]!;
    if (seg.startsWith(':')) out[seg.slice(1)] = decodeURIComponent(s[i]!);
    else if (seg !== s[i]) return null;
  }
  return out;
}

export function Link(props: { href: string; children: ComponentChildren; class?: string; title?: string; 'aria-current'?: 'page' | undefined }) {
  const { href, children, ...rest } = props;
  return (
    <a
      {...rest}
      href={href}
      onClick={(e) => {
        if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        navigate(href);
      }}
    >
      {children}
    </a>
  );
}

/** The tab's title for a page: `Audit trail · Installer`. */
export function documentTitle(page: string | null): string {
  return page ? `${page} · Installer` : 'Installer';
}

/**
 * Keeps `document.title` on the page's title and, after each navigation (not the first load), moves
 * focus to the page's h1 and announces the new page in the live region `#announcer` of index.html,
 * so that keyboard and screen-reader users start at the top of the page they opened.
 */
export function usePageChange(title: string | null, path: string): void {
  const first = useRef(true);
  useEffect(() => {
    document.title = documentTitle(title);
  }, [title]);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    const h1 = document.querySelector<HTMLElement>('main h1') ?? document.querySelector<HTMLElement>('h1');
    if (h1) {
      if (!h1.hasAttribute('tabindex')) h1.setAttribute('tabindex', '-1');
      h1.focus();
    }
    const announcer = document.getElementById('announcer');
    if (announcer) announcer.textContent = title ?? '';
  }, [path]);
}
