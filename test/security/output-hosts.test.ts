// Output hosts as the providers document them (docs/providers.md "Output hosts"): the default
// allow-lists take the URLs each provider's documents show, exact hosts and subdomain rules
// alike, and refuse look-alikes that merely contain or extend the provider's domain, any scheme
// but https, and credentials. The rules are whole DNS labels (net/host-rules.ts).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { OutputHostNotAllowedError, UnsafeUrlError, validateOutputUrl } from '../../activities/output-url';
import { loadConfig } from '../../config/env';
import { hostAllowed, hostRuleProblem } from '../../net/host-rules';

// The defaults, without the simulator's loopback names that development adds (production has none).
const defaults = loadConfig({ VIDORCH_ENV: 'test' });
const withoutLoopback = (hosts: readonly string[]) => hosts.filter((h) => h !== '127.0.0.1' && h !== 'localhost');
const HOSTS: Record<string, readonly string[]> = {
  replicate: withoutLoopback(defaults.PROVIDER_REPLICATE_OUTPUT_HOSTS),
  fal: withoutLoopback(defaults.PROVIDER_FAL_OUTPUT_HOSTS),
  kling: withoutLoopback(defaults.PROVIDER_KLING_OUTPUT_HOSTS),
};
const check = (provider: string, url: string) => validateOutputUrl(url, { allowedHosts: HOSTS[provider]!, allowPrivate: false });

/** URLs as each provider's documents (or, for Kling, its answers) show them. */
const DOCUMENTED: readonly [string, string, string][] = [
  // replicate.com/docs/topics/predictions/output-files: "served by replicate.delivery and its subdomains".
  ['replicate', 'https://replicate.delivery/yhqm/zhBT5Cu9HFZVCZC9ecfY80gCXM9uCtA1f5vJe7MHSoJRIx3NB/out-0.jpg', 'the output-files page example'],
  ['replicate', 'https://pbxt.replicate.delivery/YQbzlo6lKUyGGpR4xDlKF/out.mp4', 'a subdomain'],
  // fal.ai/docs: the CDN page (v3.fal.media), data retention and file access controls (v3b.fal.media), model pages (fal.media).
  ['fal', 'https://v3.fal.media/files/rabbit/YYbm6L.png', 'the fal CDN page example'],
  ['fal', 'https://v3b.fal.media/files/b/kangaroo/output.mp4', 'the data-retention page'],
  ['fal', 'https://fal.media/files/elephant/8kkhB12hEZI2kkbU8pZPA_test.jpeg', 'a model page example'],
  // Kling's task answers: task_result.videos[].url.
  ['kling', 'https://cdn.klingai.com/bs2/upload-kling-api/9575341070/text2video/CmYgjmbyMToAAAAAADUuvA-0_raw_video_1.mp4', 'the API CDN'],
  ['kling', 'https://v15-kling.klingai.com/bs2/upload-ylab-stunt-sgp/se/stream_lake_m2v_img2video/abc/output.mp4?x-kcdn-pid=112372', 'a video host'],
];

const LOOK_ALIKES: readonly [string, string][] = [
  ['replicate', 'https://replicate.delivery.evil.example/out.mp4'],
  ['replicate', 'https://evilreplicate.delivery/out.mp4'],
  ['replicate', 'https://replicate-delivery.com/out.mp4'],
  ['replicate', 'https://replicate.com/out.mp4'],
  ['replicate', 'https://pbxt.replicate.delivery.attacker.net/out.mp4'],
  ['fal', 'https://fal.media.evil.example/files/x.mp4'],
  ['fal', 'https://evilfal.media/files/x.mp4'],
  ['fal', 'https://v3.fal.media.co/files/x.mp4'],
  ['fal', 'https://fal.run/files/x.mp4'],
  ['kling', 'https://klingai.com.evil.example/x.mp4'],
  ['kling', 'https://notklingai.com/x.mp4'],
  ['kling', 'https://cdn.klingai.co/x.mp4'],
  ['kling', 'https://klingai.com/x.mp4'],
];

describe('the default output hosts', () => {
  for (const [provider, url, what] of DOCUMENTED) {
    test(`${provider}: ${what} is accepted (${new URL(url).hostname})`, () => {
      assert.equal(check(provider, url).hostname, new URL(url).hostname);
    });
  }

  for (const [provider, url] of LOOK_ALIKES) {
    test(`${provider}: the look-alike ${new URL(url).hostname} is refused, naming the host`, () => {
      assert.throws(
        () => check(provider, url),
        (err: unknown) => err instanceof OutputHostNotAllowedError && err.host === new URL(url).hostname,
      );
    });
  }

  test('only https, no credentials, no private address even on an allowed name (those are no allow-list matter)', () => {
    for (const url of ['http://replicate.delivery/x.mp4', 'ftp://v3.fal.media/x.mp4']) {
      assert.throws(
        () => check(url.includes('fal') ? 'fal' : 'replicate', url),
        (e: unknown) => e instanceof UnsafeUrlError && !(e instanceof OutputHostNotAllowedError),
      );
    }
    assert.throws(() => check('replicate', 'https://user:pw@replicate.delivery/x.mp4'), /credentials/);
    assert.throws(
      () => validateOutputUrl('https://169.254.169.254/x', { allowedHosts: ['169.254.169.254'], allowPrivate: false }),
      (e: unknown) => e instanceof UnsafeUrlError && !(e instanceof OutputHostNotAllowedError),
    );
  });
});

describe('host rules (net/host-rules.ts)', () => {
  test('*.domain takes subdomains at any depth by whole labels, never the domain itself nor an empty label', () => {
    const rules = ['*.replicate.delivery'];
    assert.equal(hostAllowed('pbxt.replicate.delivery', rules), true);
    assert.equal(hostAllowed('a.b.replicate.delivery', rules), true);
    assert.equal(hostAllowed('PBXT.Replicate.Delivery', rules), true);
    for (const host of [
      'replicate.delivery',
      '.replicate.delivery',
      'a..replicate.delivery',
      'xreplicate.delivery',
      'replicate.delivery.',
      'replicate.delivery.evil.example',
    ]) {
      assert.equal(hostAllowed(host, rules), false, host);
    }
    assert.equal(hostAllowed('replicate.delivery', ['replicate.delivery']), true);
    assert.equal(hostAllowed('pbxt.replicate.delivery', ['replicate.delivery']), false, 'an exact host takes no subdomain');
  });

  test('a rule is an exact host or *.<domain of two labels or more>; anything else is named', () => {
    for (const ok of ['replicate.delivery', '*.replicate.delivery', '*.fal.media', 'dnznrvs05pmza.cloudfront.net', '127.0.0.1', 'localhost']) {
      assert.equal(hostRuleProblem(ok), null, ok);
    }
    for (const bad of [
      '*',
      '*.com',
      '*.10.0.0.1',
      'a.*.example.com',
      '*replicate.delivery',
      'https://replicate.delivery',
      'replicate.delivery/x',
      '-bad.example',
    ]) {
      assert.notEqual(hostRuleProblem(bad), null, bad);
    }
  });

  test('a malformed rule is refused in every profile, by name', () => {
    assert.throws(() => loadConfig({ VIDORCH_ENV: 'test', PROVIDER_FAL_OUTPUT_HOSTS: 'fal.media,*.com' }), /PROVIDER_FAL_OUTPUT_HOSTS[\s\S]*too broad/);
    assert.deepEqual(loadConfig({ VIDORCH_ENV: 'test', PROVIDER_FAL_OUTPUT_HOSTS: 'fal.media,*.fal.media' }).PROVIDER_FAL_OUTPUT_HOSTS, [
      'fal.media',
      '*.fal.media',
    ]);
  });
});
