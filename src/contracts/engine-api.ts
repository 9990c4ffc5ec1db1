// Engine API versions ("1.45") compared as numbers: the installer's own minimum (src/adapters/engine-version.ts)
// and the minimum a target build declares (src/contracts/preflight-report.ts) are read the same way.

/** Whether an engine API version `have` is at least `min`; false for anything that is not one. */
export function apiVersionAtLeast(have: string, min: string): boolean {
  const parse = (v: string) => (/^\d+\.\d+$/.test(v) ? v.split('.').map(Number) : null);
  const [h, m] = [parse(have), parse(min)];
  if (!h || !m) return false;
  return h[0]! !== m[0]! ? h[0]! > m[0]! : h[1]! >= m[1]!;
}
