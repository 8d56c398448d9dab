import pino, { type Logger } from 'pino';
import type { LogLevel } from './config';

// Structured JSON logs (pino), the one logger type of the daemon, its backends and adapters. Attach and
// Detach log one line per call carrying the workload id and a request id, so every line of one call
// can be found with one filter (no child logger per call: it cost more than the call's planning).

export type { Logger };

export function createLogger(level: LogLevel, destination: NodeJS.WritableStream = process.stderr): Logger {
  return pino(
    {
      level,
      base: { svc: 'workloadnetd' },
      // Certificates and keys are only ever referenced by path in config; redact them if a caller logs
      // a structure that happens to contain them.
      redact: { paths: ['*.key', '*.tlsKey', '*.privateKey', '*.cert'], censor: '[redacted]' },
    },
    destination,
  );
}

/** A logger that drops everything, for tests and tools that have nowhere to log. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

export const LOGGER = Symbol.for('workloadnet.Logger');
