import type { Command } from 'commander';
import { DEFAULT_CONFIG } from '../core/config';
import { loadConfigFile } from '../core/daemon/config-file';
import { mergeConfig } from '../core/daemon/config-check';
import { checkStore, type StoreCheckResult } from '../core/store/store-check';
import { EXIT } from './client-commands';
import { json } from './output';

// `workloadnet store …`: offline commands on the state store, run without the daemon (or beside it:
// they only read).

interface StoreCheckOpts {
  stateDir?: string;
  config?: string;
  json?: boolean;
}

export function registerStoreCommands(program: Command): void {
  const store = program
    .command('store')
    .description('offline commands on the state store (they only read it)')
    .addHelpText('after', '\nExample:\n  workloadnet store check --state-dir /var/lib/workloadnet');
  store
    .command('check')
    .description('check the state store the way the daemon does before it opens it, then read every row')
    .option('--state-dir <dir>', `state store directory (default ${DEFAULT_CONFIG.stateDir})`)
    .option('-c, --config <file>', "take the state directory from the daemon's config file")
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nExit code 0 when the store is sound, 1 when it is damaged, 5 when there is no store.\n' +
        'Example:\n  workloadnet store check --state-dir /var/lib/workloadnet',
    )
    .action(async (opts: StoreCheckOpts) => {
      const file = opts.config ? loadConfigFile(opts.config) : {};
      const stateDir = mergeConfig(DEFAULT_CONFIG, file, { stateDir: opts.stateDir }).stateDir;
      const result = await checkStore(stateDir);
      process.stdout.write(opts.json ? json(result) : formatCheck(result));
      process.exitCode = !result.exists ? EXIT.notFound : result.ok ? EXIT.ok : EXIT.error;
    });
}

function formatCheck(r: StoreCheckResult): string {
  if (!r.exists) return `no store at ${r.file}: the daemon would create a new, empty one\n`;
  if (!r.ok) return `${r.file} is damaged:\n${r.problems.map((p) => `  - ${p}\n`).join('')}`;
  const id = r.identity;
  return (
    `${r.file} is sound: ${r.attachments ?? 0} attachments, ${r.addresses ?? 0} addresses, ` +
    `schema ${r.schemaVersion ?? 'unknown'}, ${r.sizeBytes} bytes\n` +
    (id ? `created ${id.createdAt} on ${id.node}, store id ${id.storeId}\n` : 'no identity recorded yet\n')
  );
}
