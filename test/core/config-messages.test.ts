import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AUTO_MTU } from '../../core/config';
import { checkConfig, parseMtu } from '../../core/daemon/config-file';
import { WorkloadNetError } from '../../core/errors';

// What a newcomer reads when a config is wrong: one likely fix rather than every option's name, the
// values a field takes, and a config checked without a daemon.

describe('config messages', () => {
  let dir: string;
  before(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-config-messages-'));
  });
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  function file(config: object): string {
    const f = path.join(dir, `config-${Math.random().toString(36).slice(2)}.json`);
    fs.writeFileSync(f, JSON.stringify(config));
    return f;
  }

  function refusal(fn: () => unknown): string {
    try {
      fn();
    } catch (err) {
      expect(err).to.be.instanceOf(WorkloadNetError);
      expect((err as WorkloadNetError).code).to.equal('INVALID_ARGUMENT');
      return (err as Error).message;
    }
    throw new Error('expected a refusal');
  }

  it('names the closest option for a mistyped key instead of listing them all', () => {
    const msg = refusal(() => checkConfig(file({ podCidr: ['10.1.0.0/24'] })));
    expect(msg).to.match(/unknown option "podCidr"; did you mean "podCidrs"\?$/);
    expect(msg).not.to.include('cniIdleTimeoutMs');
    expect(refusal(() => checkConfig(file({ fabric: { mdoe: 'off' } })))).to.match(
      /unknown option "fabric\.mdoe"; did you mean "fabric\.mode"\?/,
    );
  });

  it('refuses a dpu.goneGraceSeconds that is not a positive whole number of seconds, naming it', () => {
    for (const bad of [0, -5, 1.5, '600'])
      expect(refusal(() => checkConfig(file({ dpu: { goneGraceSeconds: bad } })))).to.include(
        `dpu.goneGraceSeconds must be a positive whole number of seconds (default 600), not ${JSON.stringify(bad)}`,
      );
    expect(() => checkConfig(file({ dpu: { goneGraceSeconds: 30 } }))).to.not.throw();
  });

  it('takes an eventLoopResolutionMs in 1..10000 ms, 100 by default, and refuses others by name', () => {
    expect(checkConfig(file({})).eventLoopResolutionMs).to.equal(100);
    expect(checkConfig(file({ eventLoopResolutionMs: 10 })).eventLoopResolutionMs).to.equal(10);
    for (const bad of [0, 10_001, 2.5, '10'])
      expect(refusal(() => checkConfig(file({ eventLoopResolutionMs: bad })))).to.include(
        'eventLoopResolutionMs must be an integer in 1..10000 (ms)',
      );
  });

  it('points a key given at the top to the section that has it', () => {
    expect(refusal(() => checkConfig(file({ hostNetns: '/run/netns/x' })))).to.match(
      /unknown option "hostNetns"; did you mean "linux\.hostNetns"\?/,
    );
  });

  it("lists only the section's options when nothing is close, and sends a top-level stranger to the docs", () => {
    const msg = refusal(() => checkConfig(file({ etcd: { qqqqqqqq: 1 } })));
    expect(msg).to.match(/the options of "etcd" are etcd\.endpoints, /);
    expect(msg).not.to.include('fabric.');
    expect(refusal(() => checkConfig(file({ qqqqqqqq: 1 })))).to.match(/listed in docs\/operations\.md/);
  });

  it("names the closest key of a network's entry", () => {
    const networks = [{ name: 'extra', backend: 'linux', podCidr: ['10.9.0.0/24'] }];
    expect(refusal(() => checkConfig(file({ networks })))).to.match(
      /networks\[0\]: unknown key "podCidr"; did you mean "podCidrs"\?/,
    );
  });

  it('refuses a wrong logLevel with the levels it takes', () => {
    expect(refusal(() => checkConfig(file({ logLevel: 'loud' })))).to.equal(
      'invalid configuration: logLevel must be one of trace, debug, info, warn, error, fatal, not "loud"',
    );
  });

  it('says what --mtu takes when it is not a number, and reads "auto" and numbers', () => {
    for (const bad of ['abc', '', '1e3', '-5'])
      expect(
        refusal(() => parseMtu(bad)),
        bad,
      ).to.equal(`--mtu must be "auto" (or 0) or a whole number in 68..65535, not "${bad}"`);
    expect(parseMtu('auto')).to.equal(AUTO_MTU);
    expect(parseMtu('1450')).to.equal(1450);
    // A number out of range is the range check's to name.
    expect(refusal(() => checkConfig(undefined, { mtu: parseMtu('70000') }))).to.match(
      /mtu must be 0 \(auto\) or an integer in 68\.\.65535, not 70000/,
    );
  });

  it('checks a config file as the daemon would, without creating anything', () => {
    const socket = path.join(dir, 'never', 'api.sock');
    const stateDir = path.join(dir, 'never', 'state');
    const c = checkConfig(file({ socket, stateDir, podCidrs: ['10.7.0.0/24'], mtu: 'auto' }), {
      logLevel: 'warn',
    });
    expect(c).to.include({ socket, stateDir, mtu: AUTO_MTU, logLevel: 'warn' });
    expect(c.podCidrs).to.deep.equal(['10.7.0.0/24']);
    expect(fs.existsSync(path.join(dir, 'never'))).to.equal(false);
    expect(refusal(() => checkConfig(path.join(dir, 'missing.json')))).to.match(/cannot read config file/);
    expect(refusal(() => checkConfig(file({ backend: 'ovs' })))).to.equal(
      'invalid configuration: backend must be "linux" or "dpu", not "ovs"',
    );
  });
});
