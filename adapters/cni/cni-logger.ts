// The logging surface the CNI adapter needs: pino's (object, message) call shape, so the daemon can pass
// its pino logger (or a child of it) unchanged.

export interface CniLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export const silentLogger: CniLogger = {
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};
