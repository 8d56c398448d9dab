import fc from 'fast-check';

// fc.assert with a readable failure: fuzz inputs run to hundreds of kilobytes, and a counterexample
// printed in full buries the one line that says what went wrong.

const MAX_REPORT = 3000;

export async function checkProperty<Ts>(
  property: fc.IAsyncProperty<Ts>,
  params: fc.Parameters<Ts>,
): Promise<void> {
  try {
    await fc.assert(property, params);
  } catch (err) {
    const e = err as Error;
    if (e.message.length > MAX_REPORT) {
      const cause = (e as { cause?: unknown }).cause;
      const why = cause instanceof Error ? cause.message : '';
      e.message = `${e.message.slice(0, MAX_REPORT)}\n… (${e.message.length - MAX_REPORT} more characters)\nCaused by: ${why.slice(0, MAX_REPORT)}`;
    }
    throw e;
  }
}
