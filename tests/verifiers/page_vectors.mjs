#!/usr/bin/env node
// Runs the verification page's own modules (static/verify-core.js, static/verify-read.js,
// static/sha256.js) in Node.js against the committed vectors, tampered copies of them, and
// Node's SHA-256.
//
//   node page_vectors.mjs VECTORS.json   prints one JSON report (see tests/test_verify_page_js.py)

import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const core = await import(path.join(here, '..', '..', 'execution_proof', 'static', 'verify-core.js'));
const read = await import(path.join(here, '..', '..', 'execution_proof', 'static', 'verify-read.js'));
const { Sha256 } = await import(path.join(here, '..', '..', 'execution_proof', 'static', 'sha256.js'));

const vectors = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const keys = vectors.public_keys;

function summary(result) {
  return {
    ok: result.ok,
    checks: Object.fromEntries(result.checks.map((c) => [c.id, c.ok])),
    keyStatus: result.keyStatus,
    recomputed: result.recomputed,
  };
}

// Every way of changing a receipt that must make it invalid.
function tamperings(receipt) {
  const out = [];
  const clone = () => JSON.parse(JSON.stringify(receipt));
  for (const key of Object.keys(core.signedPayload(receipt))) {
    const changed = clone();
    if (key === 'tags' && changed.tags !== null) {
      const first = Object.keys(changed.tags)[0];
      changed.tags[first] = changed.tags[first] + 'x';
    } else {
      changed[key] = changed[key] === null ? 'x' : changed[key] + 'x';
    }
    out.push([`changed ${key}`, changed]);
    const removed = clone();
    delete removed[key];
    out.push([`removed ${key}`, removed]);
  }
  const added = clone();
  added.extra_field = null;
  out.push(['added a null field', added]);
  const otherHash = clone();
  otherHash.receipt_hash = 'sha256:' + '0'.repeat(64);
  out.push(['replaced receipt_hash', otherHash]);
  const upperHash = clone();
  upperHash.receipt_hash = upperHash.receipt_hash.toUpperCase().replace('SHA256:', 'sha256:');
  out.push(['upper-case receipt_hash', upperHash]);
  const flipped = clone();
  flipped.signature = (flipped.signature[0] === 'A' ? 'B' : 'A') + flipped.signature.slice(1);
  out.push(['changed signature', flipped]);
  const padded = clone();
  padded.signature += '==';
  out.push(['padded signature', padded]);
  const nonCanonical = clone();
  // The last of 86 characters carries 2 unused bits: setting one keeps the bytes, breaks canonical form.
  const last = nonCanonical.signature.at(-1);
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  nonCanonical.signature = nonCanonical.signature.slice(0, -1) + alphabet[alphabet.indexOf(last) | 1];
  if (nonCanonical.signature !== receipt.signature) out.push(['non-canonical signature', nonCanonical]);
  const unknownKid = clone();
  unknownKid.sig_kid = 'no-such-key';
  out.push(['unknown sig_kid', unknownKid]);
  const otherKid = clone();
  otherKid.sig_kid = receipt.sig_kid === 'test-2026' ? 'test-2025' : 'test-2026';
  out.push(['other listed sig_kid', otherKid]);
  const number = clone();
  number.code_ref = 1;
  out.push(['a number value', number]);
  const lone = clone();
  lone.run_id = 'a\ud800b';
  out.push(['a lone surrogate', lone]);
  return out;
}

const cases = [];
for (const vector of vectors.cases) {
  const result = await core.verifyReceipt(vector.receipt, keys);
  const canonicalHex = Buffer.from(core.canonicalBytes(vector.receipt)).toString('hex');
  const tampered = [];
  for (const [what, receipt] of tamperings(vector.receipt)) {
    const bad = await core.verifyReceipt(receipt, keys);
    // What the page does with the same copy pasted: read it (then check it), or refuse to read it.
    const pasted = read.parseUserInput(JSON.stringify(receipt));
    tampered.push({ what, ok: bad.ok, checks: summary(bad).checks, read: pasted.kind });
  }
  // The same receipt inside a {ok, receipt} body is recognised as one.
  const wrapped = read.parseUserInput(JSON.stringify({ ok: true, receipt: vector.receipt }));
  cases.push({
    name: vector.name,
    kid: vector.kid,
    result: summary(result),
    canonical_matches: canonicalHex === vector.canonical_bytes_hex,
    hash_matches: result.recomputed === vector.receipt_hash,
    wrapped_kind: wrapped.kind === 'document' ? wrapped.document.shape : wrapped.kind,
    tampered,
  });
}

// A receipt with a key set that does not list its key at all is invalid.
const noKeys = await core.verifyReceipt(vectors.cases[0].receipt, { keys: [], active_kid: 'x' });

// Pinning a bundle's keys: every carried key must equal the pinned key of the same kid.
const otherKey = core.b64urlEncode(new Uint8Array(32).fill(7));
const firstKid = keys.keys[0].kid;
// A 32-byte key's last character has 2 unused bits: setting one keeps the bytes, breaks canonical form.
const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const nonCanonicalKey = (text) => text.slice(0, -1) + B64URL[B64URL.indexOf(text.at(-1)) | 1];
const withKey = (kid, key) => ({ keys: [{ kid, alg: 'Ed25519', public_key_base64url: key }], active_kid: kid });
const bundleKeys = Object.fromEntries(
  [
    ['same', keys, keys],
    ['none carried', { keys: [], active_kid: firstKid }, keys],
    ['other key, same kid', withKey(firstKid, otherKey), keys],
    ['unknown kid', { keys: [...keys.keys, ...withKey('stranger', otherKey).keys] }, keys],
    ['non-canonical encoding', withKey(firstKid, nonCanonicalKey(keys.keys[0].public_key_base64url)), keys],
    ['carried keys not a list', { keys: {} }, keys],
    ['empty pinned set', keys, { keys: [], active_kid: null }],
  ].map(([what, carried, pinned]) => {
    const c = core.bundleKeysCheck(carried, pinned);
    return [what, { ok: c.ok, differing: c.differing, unknown: c.unknown, id: c.id }];
  }),
);

// Incremental SHA-256 against node:crypto: empty input, block boundaries, random data in odd chunks.
const sha = [];
const sizes = [0, 1, 55, 56, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096, 65537, 1048576 + 3];
for (const size of sizes) {
  const data = randomBytes(size);
  const expected = createHash('sha256').update(data).digest('hex');
  const oneShot = new Sha256().update(data).hexDigest();
  const chunked = new Sha256();
  let offset = 0;
  let step = 1;
  while (offset < data.length) {
    chunked.update(data.subarray(offset, offset + step));
    offset += step;
    step = (step * 7 + 3) % 997 || 1;
  }
  sha.push({ size, one_shot: oneShot === expected, chunked: chunked.hexDigest() === expected });
}
const emptyHex = new Sha256().hexDigest();

// Strict base64url.
const b64 = {
  good: Buffer.from(core.b64urlDecodeStrict('A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg', 32)).toString('hex'),
  rejects: ['A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=', 'A6EHv+POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg', 'A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbh', 'A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMb'].map(
    (text) => {
      try {
        core.b64urlDecodeStrict(text, 32);
        return false;
      } catch {
        return true;
      }
    },
  ),
};

// A whole bundle of the first vector (the first of its chain), as the service writes one.
const first = vectors.cases.find((c) => c.receipt.prev_receipt_hash === null).receipt;
const bundle = {
  format: 'eps-receipt-bundle',
  version: 1,
  created_at: '2026-01-15T10:05:00.000Z',
  service: 'https://proof.example',
  receipt: first,
  keys,
  chain: [],
  chain_complete: true,
};
const inputs = [
  'rcpt_01KF0HJ080VECT0000000000A1',
  '  rcpt_01KF0HJ080VECT0000000000A1\n',
  'not an id',
  '{"ok": true',
  JSON.stringify(bundle),
  JSON.stringify({ ...bundle, version: 2 }),
  JSON.stringify({ ...bundle, receipt: {} }),
  '{"format": "eps-receipt-bundle", "version": 1, "receipt": {}, "keys": {"keys": []}}',
  '{"error": {"code": "not_found", "message": "receipt not found"}, "request_id": "x"}',
  JSON.stringify(first),
  JSON.stringify({ ok: true, receipt: first, service_url: 'https://proof.example' }),
  JSON.stringify({ ...first, keys }),
  '',
].map((text) => {
  const parsed = read.parseUserInput(text);
  return parsed.kind === 'document' ? `document:${parsed.document.shape}` : parsed.kind;
});

process.stdout.write(
  JSON.stringify({
    cases,
    no_keys: summary(noKeys),
    sha,
    empty_hex: emptyHex,
    b64,
    inputs,
    bundle_keys: bundleKeys,
    support: await core.cryptoSupport(),
  }) + '\n',
);
