// Loads a module that the image's bundle leaves outside itself: PGlite (the embedded database) and
// the schema migrations, read from their directory at run time. In the bundle this module is
// replaced (scripts/bundle-backend.ts) by the import() of the bundle's loader (src/bundle/start.ts):
// the bundle runs as a script from a code cache, and a script's own import() would need Node's
// experimental vm loader.
export function importModule<T>(specifier: string): Promise<T> {
  return import(specifier) as Promise<T>;
}
