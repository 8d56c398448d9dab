// A resource the tests of a `describe` share: made before them (or before each, with `each`), undone
// after. What is returned stands for the resource of the moment: reading a property reads it from the
// one made last, so that it can be taken at describe time, before anything exists.

export interface SuiteResourceOptions {
  /** A fresh resource for each test rather than one for all of them. */
  each?: boolean;
}

export function suiteResource<T extends object>(
  make: () => Promise<T>,
  undo: (made: T) => unknown,
  opts: SuiteResourceOptions = {},
): T {
  let current: T | undefined;
  (opts.each ? beforeEach : before)(async () => {
    current = await make();
  });
  (opts.each ? afterEach : after)(async () => {
    if (current) await undo(current);
  });
  return new Proxy({} as T, {
    get(_target, key) {
      if (!current) throw new Error(`no ${String(key)} yet: it is made before the tests`);
      return Reflect.get(current, key) as unknown;
    },
  });
}
