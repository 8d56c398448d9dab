import * as fs from 'node:fs';
import { closestOption } from '../../lib/closest-name';
import { invalidArgument } from '../errors';
import { AUTO_MTU, DEFAULT_CONFIG, type ConfigOverrides, type DaemonConfig } from '../config';
import { OPTION_DOCS } from '../option-docs';
import { mergeConfig } from './config-check';

// Reading the configuration a person wrote: the JSON file (--config), whose unknown keys are refused
// with the likely fix, and the --mtu flag. Its own file because it is the daemon's input, in words a
// person typed, apart from the configuration's shape (core/config.ts), which every room reads, and
// its check (config-check.ts), neither of which touches a file.

/** Reads a JSON config file; unknown keys are an error, so a typo does not silently fall back to a default. */
export function loadConfigFile(file: string): ConfigOverrides {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw invalidArgument(`cannot read config file ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw invalidArgument(`config file ${file} is not valid JSON: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw invalidArgument(`config file ${file} must hold a JSON object`);
  }
  checkKeys(parsed as Record<string, unknown>, '', file);
  // "auto" reads as AUTO_MTU, so that the rest of the daemon sees a number.
  const config = parsed as Record<string, unknown>;
  if (config.mtu === 'auto') config.mtu = AUTO_MTU;
  if (Array.isArray(config.networks))
    for (const n of config.networks as unknown[])
      if (n && typeof n === 'object' && (n as { mtu?: unknown }).mtu === 'auto')
        (n as { mtu: number }).mtu = AUTO_MTU;
  return config as ConfigOverrides;
}

/**
 * The configuration a daemon would start with (defaults, the file, then `layers`: flags), validated and
 * nothing started; throws INVALID_ARGUMENT with the words the daemon would exit with.
 */
export function checkConfig(file: string | undefined, ...layers: ConfigOverrides[]): DaemonConfig {
  return mergeConfig(DEFAULT_CONFIG, file === undefined ? {} : loadConfigFile(file), ...layers);
}

/** An MTU as a flag gives it: "auto" is AUTO_MTU, else a whole number (validation checks its range). */
export function parseMtu(flag: string): number {
  if (flag === 'auto') return AUTO_MTU;
  if (!/^\d{1,6}$/.test(flag.trim()))
    throw invalidArgument(`--mtu must be "auto" (or 0) or a whole number in 68..65535, not "${flag}"`);
  return Number(flag);
}

function checkKeys(obj: Record<string, unknown>, prefix: string, file: string): void {
  for (const [k, v] of Object.entries(obj)) {
    const dotted = prefix + k;
    if ((k === 'linux' || k === 'dpu' || k === 'etcd' || k === 'fabric') && prefix === '') {
      if (!v || typeof v !== 'object') throw invalidArgument(`${file}: "${k}" must be an object`);
      checkKeys(v as Record<string, unknown>, `${k}.`, file);
    } else if (!(dotted in OPTION_DOCS)) {
      throw invalidArgument(`${file}: unknown option "${dotted}"; ${suggestOption(dotted, prefix)}`);
    }
  }
}

/** The likely fix of an unknown key (lib/closest-name.ts), else where its section's options are. */
function suggestOption(dotted: string, prefix: string): string {
  const options = Object.keys(OPTION_DOCS);
  const guess = closestOption(dotted, options);
  const section = options.filter((o) => prefix && o.startsWith(prefix));
  if (guess) return `did you mean "${guess}"?`;
  if (section.length) return `the options of "${prefix.slice(0, -1)}" are ${section.join(', ')}`;
  return 'every option is listed in docs/operations.md ("Configure")';
}
