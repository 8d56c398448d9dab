// How a failed call to the Kubernetes API reads: its HTTP status (none when the server never answered,
// which is what tells "unreachable" from "answered no") and one short line for a log or Status. Its
// own file because the list+watch and the annotation's writer both judge failures by it.

/** The HTTP status of an API answer, or undefined when there was none (connection refused). */
export function codeOf(err: unknown): number | undefined {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

/** The failure in one line of at most 200 characters, its HTTP status first when there was one. */
export function describeApiError(err: unknown): string {
  if (err instanceof Error) {
    const code = codeOf(err);
    return `${code !== undefined ? `${code}: ` : ''}${err.message}`.split('\n')[0]!.slice(0, 200);
  }
  return String(err).slice(0, 200);
}
