// What every signed-in page reads from the shell: who is signed in and the update check. Its own
// module, so the pages depend on it and not on the shell that imports them.
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Me, SelfUpdateCheck } from './api.ts';

export interface AppState {
  me: Me;
  check: SelfUpdateCheck | null;
  checkError: string | null;
}

export const AppContext = createContext<AppState | null>(null);

export function useApp(): AppState {
  const v = useContext(AppContext);
  if (!v) throw new Error('useApp outside the signed-in app');
  return v;
}
