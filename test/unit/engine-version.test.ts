// The engine API comparison behind the minimum engine (src/adapters/engine-version.ts).
import { describe, expect, it } from 'vitest';
import { apiAtLeast, MIN_ENGINE_API } from '../../src/adapters/engine-version.ts';

describe('apiAtLeast', () => {
  it('compares major then minor as numbers, not as text', () => {
    expect(apiAtLeast('1.41', '1.41')).toBe(true);
    expect(apiAtLeast('1.45', '1.41')).toBe(true);
    expect(apiAtLeast('1.100', '1.41')).toBe(true); // "1.100" < "1.41" as text
    expect(apiAtLeast('2.0', '1.41')).toBe(true);
    expect(apiAtLeast('1.40', '1.41')).toBe(false);
    expect(apiAtLeast('1.9', '1.41')).toBe(false); // "1.9" > "1.41" as text
    expect(apiAtLeast('0.99', '1.41')).toBe(false);
  });

  it('takes nothing that is not a version as supported', () => {
    for (const bad of ['', '1', '1.41.0', 'v1.41', '1.x', ' 1.41']) expect(apiAtLeast(bad, MIN_ENGINE_API), bad).toBe(false);
  });
});
