import type { Command } from 'commander';
import { effectiveNetworks } from '../core/ipam/effective-networks';
import { fabricMode } from '../core/fabric/fabric-settings';
import { EXIT } from './client-commands';
import { effectiveConfig } from './daemon-command';

// `workloadnet config check`: reads a config file as the daemon would (the same parsing and
// validation, the same messages) and starts nothing: no socket, no store, no kernel object.

/** Where the systemd unit and the Kubernetes manifest put the config. */
const DEFAULT_CONFIG_FILE = '/etc/workloadnet/config.json';

export function registerConfigCommand(program: Command): void {
  const config = program.command('config').description('the daemon’s configuration file');
  config
    .command('check')
    .description('validate a config file as the daemon would, without starting anything')
    .option('-c, --config <file>', 'JSON config file', DEFAULT_CONFIG_FILE)
    .addHelpText(
      'after',
      '\nExit code 0 when the daemon would accept it, 2 (with the daemon’s message) when not.\n' +
        'Example:\n  workloadnet config check --config /etc/workloadnet/config.json',
    )
    .action((opts: { config: string }) => {
      let summary: string;
      try {
        const c = effectiveConfig({ config: opts.config });
        const networks = effectiveNetworks(c).map(
          (n) => `${n.name} (${n.backend}${n.podCidrs.length ? `, ${n.podCidrs.join(', ')}` : ''})`,
        );
        summary =
          `${opts.config}: valid\n` +
          `  backend ${c.backend}, pool source ${c.poolSource}, fabric ${fabricMode(c)}\n` +
          `  networks: ${networks.join('; ')}\n`;
      } catch (err) {
        process.stderr.write(`workloadnet: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = EXIT.usage;
        return;
      }
      process.stdout.write(summary);
    });
}
