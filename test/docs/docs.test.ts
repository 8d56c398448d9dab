import { expect } from 'chai';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { buildProgram } from '../../cli/workloadnet';
import { DEFAULT_CONFIG, OPTION_DOCS } from '../../core/config';
import { loadConfigFile } from '../../core/daemon/config-file';
import { mergeConfig } from '../../core/daemon/config-check';

// The documentation is checked against the code, so a new option or command cannot ship undocumented.

const ROOT = path.resolve(__dirname, '..', '..', '..');
const read = (rel: string): string => fs.readFileSync(path.join(ROOT, rel), 'utf8');

function flatKeys(obj: object, prefix = ''): string[] {
  return Object.entries(obj).flatMap(([k, v]) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? flatKeys(v as object, `${prefix}${k}.`)
      : [`${prefix}${k}`],
  );
}

describe('documentation', () => {
  const configKeys = flatKeys(DEFAULT_CONFIG);

  it('describes every config option in the code (OPTION_DOCS matches the config type)', () => {
    expect(Object.keys(OPTION_DOCS).sort()).to.deep.equal([...configKeys].sort());
  });

  it('lists every config option in docs/operations.md and the README', () => {
    const ops = read('docs/operations.md');
    const readme = read('README.md');
    for (const key of configKeys) {
      expect(ops, `docs/operations.md lacks ${key}`).to.include(`\`${key}\``);
      expect(readme.includes(`\`${key}\``) || readme.includes(`\`${key}\`,`), `README lacks ${key}`).to.equal(
        true,
      );
    }
  });

  it('ships example configs that together show every option, each accepted by the daemon', () => {
    // config.example.json: the daemon's options; config.pools.example.json: the cluster pool sources.
    const files = ['config.example.json', 'config.pools.example.json'].map((f) =>
      path.join(ROOT, 'packaging', f),
    );
    const keys = new Set(files.flatMap((f) => flatKeys(JSON.parse(fs.readFileSync(f, 'utf8')) as object)));
    expect([...keys].sort()).to.deep.equal([...configKeys].sort());
    for (const file of files) expect(() => mergeConfig(DEFAULT_CONFIG, loadConfigFile(file))).to.not.throw();
  });

  it('documents every CLI command and every daemon flag in docs/operations.md', () => {
    const ops = read('docs/operations.md');
    const program = buildProgram();
    for (const cmd of program.commands) {
      expect(ops, `docs/operations.md lacks "workloadnet ${cmd.name()}"`).to.include(
        `workloadnet ${cmd.name()}`,
      );
    }
    const daemon = program.commands.find((c) => c.name() === 'daemon');
    for (const opt of daemon?.options ?? []) {
      if (opt.long === '--config') continue;
      expect(ops, `docs/operations.md lacks ${opt.long}`).to.include(`\`${opt.long}\``);
    }
  });

  it('has the architecture, operations, DPU protocol, troubleshooting and benchmark documents', () => {
    for (const doc of [
      'architecture.md',
      'operations.md',
      'dpu-protocol.md',
      'troubleshooting.md',
      'benchmarks.md',
    ]) {
      expect(read(`docs/${doc}`).length, doc).to.be.greaterThan(500);
    }
  });
});
