import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DEFAULT_CONFIG } from '../../core/config';
import { loadConfigFile } from '../../core/daemon/config-file';
import { mergeConfig } from '../../core/daemon/config-check';

// The Linux backend's part of the daemon's configuration, as read from a config file.
describe('linux config', () => {
  let dir: string;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-linux-config-'));
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  function fromFile(linux: object): ReturnType<typeof mergeConfig> {
    const file = path.join(dir, 'config.json');
    fs.writeFileSync(file, JSON.stringify({ linux }));
    return mergeConfig(DEFAULT_CONFIG, loadConfigFile(file));
  }

  it('turns IPv6 link-local addresses off on IPv4-only links unless ipv6LinkLocal is set', () => {
    expect(DEFAULT_CONFIG.linux.ipv6LinkLocal).to.equal(false);
    expect(fromFile({ ipv6LinkLocal: true }).linux).to.include({ ipv6LinkLocal: true, linkGroup: 0x776e });
    expect(fromFile({ linkGroup: 7 }).linux.ipv6LinkLocal).to.equal(false);
  });

  it('refuses an ipv6LinkLocal that is not true or false, naming the option', () => {
    for (const bad of ['yes', 1, null]) {
      expect(() => fromFile({ ipv6LinkLocal: bad }), String(bad)).to.throw(
        /invalid configuration: linux\.ipv6LinkLocal must be true or false/,
      );
    }
  });
});
