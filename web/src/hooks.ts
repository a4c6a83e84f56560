import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, CHANGED } from './api';

export interface Loaded<T> {
  data: T | null;
  error: ApiError | null;
  reload: () => Promise<void>;
}

/**
 * Loads with `fetcher` now, again when `deps` change, and every `everyMs` while the page is open
 * (the dashboard's live view: it polls the API, the one source of truth). A slow answer to an
 * older query never overwrites a newer one.
 */
export function useLoad<T>(fetcher: () => Promise<T>, deps: unknown[], everyMs?: number): Loaded<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const generation = useRef(0);
  const fetcherRef = useRef(fetcher);
  fetcherRef.current = fetcher;
  const reload = useCallback(async () => {
    const mine = ++generation.current;
    try {
      const value = await fetcherRef.current();
      if (mine !== generation.current) return;
      setData(value);
      setError(null);
    } catch (e) {
      if (mine !== generation.current) return;
      setError(e instanceof ApiError ? e : new ApiError(0, 'ERROR', String(e)));
    }
  }, []);
  useEffect(() => {
    void reload();
    // After a write anywhere on the page; a burst of writes (a catalog import) reloads once.
    let soon: ReturnType<typeof setTimeout> | undefined;
    const onChanged = () => {
      clearTimeout(soon);
      soon = setTimeout(() => void reload(), 100);
    };
    window.addEventListener(CHANGED, onChanged);
    const timer = everyMs
      ? setInterval(() => {
          if (!document.hidden) void reload();
        }, everyMs)
      : undefined;
    return () => {
      clearInterval(timer);
      clearTimeout(soon);
      window.removeEventListener(CHANGED, onChanged);
    };
  }, deps);
  return { data, error, reload };
}
