// A small history router: paths under /ui/, query string as the page's state (filters, SQL), so
// every view has a link that can be shared and reloaded.

import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';

export const BASE = '/ui';

const CHANGE = 'keel:navigate';

export interface Location {
  /** Path below /ui, starting with '/'. */
  path: string;
  query: URLSearchParams;
}

function current(): Location {
  let p = window.location.pathname;
  if (p.startsWith(BASE)) p = p.slice(BASE.length);
  if (p === '') p = '/';
  return { path: p, query: new URLSearchParams(window.location.search) };
}

export function useLocation(): Location {
  const [loc, setLoc] = useState(current);
  useEffect(() => {
    const on = () => setLoc(current());
    window.addEventListener('popstate', on);
    window.addEventListener(CHANGE, on);
    return () => {
      window.removeEventListener('popstate', on);
      window.removeEventListener(CHANGE, on);
    };
  }, []);
  return loc;
}

/** `to` is a path below /ui ('/invocations?status=running'). */
export function navigate(to: string, { replace = false } = {}): void {
  const url = BASE + to;
  if (url === window.location.pathname + window.location.search) return;
  if (replace) window.history.replaceState(null, '', url);
  else window.history.pushState(null, '', url);
  window.dispatchEvent(new Event(CHANGE));
}

/** Matches '/invocations/:id' against a path; params are decoded. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const ps = pattern.split('/');
  const xs = path.split('/');
  if (ps.length !== xs.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < ps.length; i++) {
    const p = ps[i]!;
    const x = xs[i]!;
    if (p.startsWith(':')) {
      if (x === '') return null;
      try {
        out[p.slice(1)] = decodeURIComponent(x);
      } catch {
        return null;
      }
    } else if (p !== x) return null;
  }
  return out;
}

/** Builds '/path?a=1' from a path and the non-empty query values. */
export function href(path: string, query: Record<string, string | number | undefined | null> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

export interface LinkProps {
  to: string;
  children: ComponentChildren;
  class?: string;
  title?: string;
  id?: string;
  'aria-current'?: 'page';
}

export function Link(props: LinkProps) {
  const { to, children, ...rest } = props;
  const onClick = (e: MouseEvent) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return (
    <a {...rest} href={BASE + to} onClick={onClick}>
      {children}
    </a>
  );
}
