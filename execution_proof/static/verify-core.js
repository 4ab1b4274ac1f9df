// Receipt verification for the public page (docs/verify-page.md), as a DOM-free ES module:
// the page (static/verify.js) and the Node.js tests (tests/verifiers/page_vectors.mjs) import
// this same file. It follows docs/receipt-format.md: drop four keys, RFC 8785 (JCS) of a
// strings/nulls/tags object, SHA-256, Ed25519 over the ASCII bytes of the receipt_hash string.
// Only WebCrypto (globalThis.crypto.subtle) is used, which browsers expose in secure contexts.

export const UNSIGNED = ['receipt_hash', 'signature', 'sig_kid', 'receipt_kind'];
const SHORT = { '"': '\\"', '\\': '\\\\', '\b': '\\b', '\t': '\\t', '\n': '\\n', '\f': '\\f', '\r': '\\r' };
const HASH_RE = /^sha256:[0-9a-f]{64}$/;
const SIG_RE = /^[A-Za-z0-9_-]{86}$/;
const RECEIPT_ID_RE = /^rcpt_[0-9A-Za-z]{10,64}$/;
const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

export function isObject(v) {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// ---------------------------------------------------------------- canonical bytes (JCS)

function jcsString(s) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdfff) {
      // A surrogate must be the high half of a valid pair: a lone one cannot be UTF-8 encoded.
      const d = s.charCodeAt(i + 1);
      if (c > 0xdbff || !(d >= 0xdc00 && d <= 0xdfff)) throw new Error('a string holds a lone surrogate');
      out += s[i] + s[i + 1];
      i++;
      continue;
    }
    const ch = s[i];
    if (Object.prototype.hasOwnProperty.call(SHORT, ch)) out += SHORT[ch];
    else if (c < 0x20) out += '\\u' + c.toString(16).padStart(4, '0');
    else out += ch;
  }
  return out + '"';
}

/** RFC 8785 text of a value made of strings, nulls and objects (all a receipt holds). */
export function jcs(v) {
  if (v === null) return 'null';
  if (typeof v === 'string') return jcsString(v);
  if (isObject(v)) {
    // sort() without a comparator compares UTF-16 code units, which is what JCS requires.
    const keys = Object.keys(v).sort();
    return '{' + keys.map((k) => jcsString(k) + ':' + jcs(v[k])).join(',') + '}';
  }
  throw new Error('receipts hold only strings, nulls and the tags object (found ' + typeof v + ')');
}

/** The signed payload: the receipt minus receipt_hash, signature, sig_kid and receipt_kind. */
export function signedPayload(receipt) {
  const out = {};
  for (const key of Object.keys(receipt)) if (!UNSIGNED.includes(key)) out[key] = receipt[key];
  return out;
}

export function canonicalBytes(receipt) {
  return new TextEncoder().encode(jcs(signedPayload(receipt)));
}

// ---------------------------------------------------------------- encodings

export function toHex(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length; i++) out += bytes[i].toString(16).padStart(2, '0');
  return out;
}

export function b64urlEncode(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] || 0) << 8) | (bytes[i + 2] || 0);
    const left = bytes.length - i;
    out += B64URL[(n >> 18) & 63] + B64URL[(n >> 12) & 63];
    if (left > 1) out += B64URL[(n >> 6) & 63];
    if (left > 2) out += B64URL[n & 63];
  }
  return out;
}

/** Strict base64url without padding: only the URL alphabet, exactly `size` bytes, canonical. */
export function b64urlDecodeStrict(text, size) {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text)) throw new Error('not base64url without padding');
  if (text.length % 4 === 1) throw new Error('impossible base64url length');
  const out = new Uint8Array(Math.floor((text.length * 3) / 4));
  let bits = 0;
  let acc = 0;
  let j = 0;
  for (const ch of text) {
    acc = (acc << 6) | B64URL.indexOf(ch);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[j++] = (acc >> bits) & 0xff;
    }
  }
  if (out.length !== size) throw new Error(`decodes to ${out.length} bytes, expected ${size}`);
  // Canonical: the unused low bits of the last character must be zero (re-encoding gives the same text).
  if (b64urlEncode(out) !== text) throw new Error('non-canonical base64url');
  return out;
}

function asciiBytes(text) {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x7f) throw new Error('not ASCII');
    out[i] = c;
  }
  return out;
}

// ---------------------------------------------------------------- WebCrypto

function subtleOrThrow() {
  const subtle = globalThis.crypto && globalThis.crypto.subtle;
  if (!subtle) throw new Error('WebCrypto (crypto.subtle) is not available here');
  return subtle;
}

export async function sha256HexSubtle(bytes) {
  return toHex(new Uint8Array(await subtleOrThrow().digest('SHA-256', bytes)));
}

// The test key test-2026 (a valid Ed25519 point), used only to probe for Ed25519 support.
const PROBE_KEY = 'A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg';

/**
 * What this environment can do: {ok, reason}. WebCrypto exists only in secure contexts
 * (https, or http on localhost / 127.0.0.1), and Ed25519 only in recent browsers.
 */
export async function cryptoSupport() {
  if (globalThis.isSecureContext === false) {
    return { ok: false, reason: 'insecure-context' };
  }
  const subtle = globalThis.crypto && globalThis.crypto.subtle;
  if (!subtle) return { ok: false, reason: 'no-subtle' };
  try {
    await subtle.importKey('raw', b64urlDecodeStrict(PROBE_KEY, 32), { name: 'Ed25519' }, false, ['verify']);
  } catch {
    return { ok: false, reason: 'no-ed25519' };
  }
  return { ok: true, reason: null };
}

// ---------------------------------------------------------------- checks

function check(id, ok, title, detail) {
  return { id, ok, title, detail };
}

/** Format problems of a receipt (receipt-format.md, verifying step 2), as readable strings; [] when well formed. */
export function formatProblems(receipt) {
  if (!isObject(receipt)) return ['the receipt is not a JSON object'];
  const problems = [];
  if (typeof receipt.receipt_hash !== 'string' || !HASH_RE.test(receipt.receipt_hash)) {
    problems.push('receipt_hash is not "sha256:" followed by 64 lowercase hex digits');
  }
  if (typeof receipt.signature !== 'string' || !SIG_RE.test(receipt.signature)) {
    problems.push('signature is not 86 base64url characters without padding');
  }
  if (typeof receipt.sig_kid !== 'string') problems.push('sig_kid is missing or not a string');
  for (const [key, value] of Object.entries(signedPayload(receipt))) {
    if (key === 'tags' && isObject(value)) {
      if (!Object.values(value).every((t) => typeof t === 'string')) problems.push('a tag value is not a string');
    } else if (value !== null && typeof value !== 'string') {
      problems.push(`${key} is neither a string nor null`);
    }
  }
  return problems;
}

/** The key named `kid` in a GET /v1/public-key body: {entry, status: 'active'|'retired'} or null. */
export function findKey(keySet, kid) {
  if (!isObject(keySet) || !Array.isArray(keySet.keys) || typeof kid !== 'string') return null;
  const entry = keySet.keys.find((k) => isObject(k) && k.kid === kid);
  if (!entry) return null;
  return { entry, status: keySet.active_kid === kid ? 'active' : 'retired' };
}

/**
 * Verify one receipt against a key set. Returns
 * {ok, checks: [{id, ok, title, detail}], recomputed, keyStatus}; never throws for bad input.
 * `label` names the receipt in the explanations (e.g. "The receipt", "Chain entry 1").
 */
export async function verifyReceipt(receipt, keySet, label = 'The receipt') {
  const subtle = subtleOrThrow();
  const checks = [];
  const problems = formatProblems(receipt);
  checks.push(
    check(
      'format',
      problems.length === 0,
      'Format',
      problems.length === 0
        ? `${label} has the expected shape: a receipt_hash, an 86-character signature, a key id, and only text or empty values.`
        : `${label} is malformed: ${problems.join('; ')}.`,
    ),
  );
  if (!isObject(receipt)) {
    return { ok: false, checks, recomputed: null, keyStatus: null };
  }

  // Self-consistency: recompute the hash of the signed fields.
  let recomputed = null;
  let canonicalError = null;
  try {
    recomputed = 'sha256:' + (await sha256HexSubtle(canonicalBytes(receipt)));
  } catch (err) {
    canonicalError = err instanceof Error ? err.message : String(err);
  }
  const hashOk = recomputed !== null && recomputed === receipt.receipt_hash;
  let hashDetail;
  if (recomputed === null) {
    hashDetail = `The signed fields could not be canonicalized (${canonicalError}), so the hash cannot be recomputed.`;
  } else if (hashOk) {
    hashDetail =
      'The fields were canonicalized (RFC 8785) and hashed with SHA-256 in this browser; the result equals ' +
      `receipt_hash (${recomputed}). No signed field was changed after the receipt was hashed.`;
  } else {
    hashDetail =
      `The recomputed hash ${recomputed} differs from receipt_hash ${String(receipt.receipt_hash)}: ` +
      'at least one signed field was changed, added or removed after the receipt was issued.';
  }
  checks.push(check('self_consistency', hashOk, 'Self-consistency (recomputed hash)', hashDetail));

  // Key id: pick the key by sig_kid, never by active_kid, never by trying every key.
  const kid = receipt.sig_kid;
  const found = findKey(keySet, kid);
  let publicKey = null;
  let keyDetail;
  let keyStatus = null;
  if (found === null) {
    keyDetail = `The key id ${JSON.stringify(kid)} is not in the service's key list, so the receipt cannot be genuine.`;
  } else if (found.entry.alg !== 'Ed25519') {
    keyDetail = `The key ${JSON.stringify(kid)} is listed with algorithm ${JSON.stringify(found.entry.alg)}, not Ed25519.`;
  } else {
    try {
      const raw = b64urlDecodeStrict(found.entry.public_key_base64url, 32);
      publicKey = await subtle.importKey('raw', raw, { name: 'Ed25519' }, false, ['verify']);
      keyStatus = found.status;
      keyDetail =
        found.status === 'active'
          ? `Signed with key "${kid}", the service's active signing key.`
          : `Signed with key "${kid}", a retired key: it no longer signs new receipts but stays listed so the ` +
            'receipts it signed remain verifiable.';
    } catch (err) {
      keyDetail = `The listed public key "${kid}" is not a valid raw Ed25519 key (${err instanceof Error ? err.message : err}).`;
    }
  }
  checks.push(check('key', publicKey !== null, 'Key id', keyDetail));

  // Signature: Ed25519 over the 71 ASCII bytes of the receipt_hash string.
  let sigOk = false;
  let sigDetail;
  if (publicKey === null) {
    sigDetail = 'Not checked: there is no usable public key for this receipt.';
  } else {
    try {
      const sig = b64urlDecodeStrict(receipt.signature, 64);
      const message = asciiBytes(String(receipt.receipt_hash));
      sigOk = await subtle.verify({ name: 'Ed25519' }, publicKey, sig, message);
      sigDetail = sigOk
        ? `The Ed25519 signature over receipt_hash is valid for key "${kid}": the service issued exactly this hash.`
        : `The Ed25519 signature does not match receipt_hash for key "${kid}": the receipt was not signed by that key as shown.`;
    } catch (err) {
      sigDetail = `The signature is malformed (${err instanceof Error ? err.message : err}).`;
    }
  }
  checks.push(check('signature', sigOk, 'Signature', sigDetail));

  return { ok: checks.every((c) => c.ok), checks, recomputed, keyStatus };
}

/**
 * Verify the chain entries of a bundle: each one genuine and each link equal.
 * chain = [previous receipt, its previous, ...] (newest first). `judge` (optional, under a
 * version 2 trust root: verify-keys.js judgeReceipt) says whether each entry's key counts: an
 * entry whose key has no certificate at hand, but is otherwise sound, gets the reason
 * no_key_certificate (not verified) instead of failing as evidence.
 */
export async function verifyChain(receipt, chain, keySet, judge = null) {
  const checks = [];
  if (!Array.isArray(chain)) {
    checks.push(check('chain', false, 'Chain', 'The bundle\'s "chain" is not a list.'));
    return { ok: false, checks };
  }
  let newer = receipt;
  for (let i = 0; i < chain.length; i++) {
    const entry = chain[i];
    const name = `Chain entry ${i + 1}`;
    const result = await verifyReceipt(entry, keySet, name);
    const failed = result.checks.filter((c) => !c.ok);
    const certificate = judge ? await judge(entry) : { state: 'ok' };
    const sound = result.checks.every((c) => c.ok || c.id === 'key' || c.id === 'signature');
    const lacking = certificate.state === 'no_key_certificate' && sound;
    const genuine = check(
      `chain_receipt_${i + 1}`,
      result.ok && certificate.state === 'ok',
      `${name}: genuine`,
      result.ok && certificate.state === 'ok'
        ? `${name} (${isObject(entry) ? entry.receipt_id : '?'}) is self-consistent and signed by the ${result.keyStatus} key "${entry.sig_kid}".` +
            (judge ? ` ${certificate.detail}` : '')
        : lacking
          ? `${name} is self-consistent, but not checked: ${certificate.detail}`
          : `${name} fails: ${[...failed.map((c) => c.detail), ...(certificate.state === 'ok' ? [] : [certificate.detail])].join(' ')}`,
    );
    if (lacking) genuine.reason = 'no_key_certificate';
    if (judge) genuine.state = certificate.state;
    checks.push(genuine);
    const expected = isObject(newer) ? newer.prev_receipt_hash : undefined;
    const actual = isObject(entry) ? entry.receipt_hash : undefined;
    const sameProject = isObject(newer) && isObject(entry) && newer.project_id === entry.project_id;
    const linkOk = typeof expected === 'string' && expected === actual && sameProject;
    const newerName = i === 0 ? 'the receipt' : `chain entry ${i}`;
    let detail;
    if (typeof expected !== 'string') {
      detail = `${newerName} has no prev_receipt_hash, so nothing should follow it, but the bundle has ${name}.`;
    } else if (expected !== actual) {
      detail = `${newerName} points to ${expected}, but ${name} has receipt_hash ${String(actual)}: the link is broken.`;
    } else if (!sameProject) {
      detail = `${name} belongs to another project than ${newerName}.`;
    } else {
      detail = `prev_receipt_hash of ${newerName} equals the receipt_hash of ${name} (same project).`;
    }
    checks.push(check(`chain_link_${i + 1}`, linkOk, `Chain link ${i + 1}`, detail));
    newer = entry;
  }
  return { ok: checks.every((c) => c.ok), checks, oldest: newer };
}

function sameKey(carried, pinned) {
  try {
    const a = b64urlDecodeStrict(carried.public_key_base64url, 32);
    const b = b64urlDecodeStrict(pinned.public_key_base64url, 32);
    return a.every((byte, i) => byte === b[i]);
  } catch {
    return false;
  }
}

/**
 * Pin a bundle's keys (docs/bundles.md): every key the bundle carries must equal the pinned key
 * of the same kid. `pinned` is a GET /v1/public-key body; `source` names it: null for the
 * service's published keys, else what the page was given (`the saved key set "keys.json"`,
 * `the trust root "trust-root.json"`). Returns a check with `differing` (the kids carried with
 * another key) and `unknown` (kids the pinned set lacks).
 */
export function bundleKeysCheck(carried, pinned, source = null) {
  const where = source === null ? 'this service publishes (GET /v1/public-key)' : `in ${source}`;
  const owner = source === null ? "this service's keys" : `the keys of ${source}`;
  const entries = isObject(carried) ? carried.keys : undefined;
  if (!Array.isArray(entries) || !entries.every((e) => isObject(e) && typeof e.kid === 'string')) {
    return {
      ...check('bundle_keys', false, 'Bundle keys', `The bundle's key list is malformed, so its keys are not ${owner}.`),
      differing: [],
      unknown: [],
    };
  }
  const differing = [];
  const unknown = [];
  for (const entry of entries) {
    const found = findKey(pinned, entry.kid);
    if (found === null) unknown.push(entry.kid);
    else if (!sameKey(entry, found.entry)) differing.push(entry.kid);
  }
  const kids = entries.map((e) => JSON.stringify(e.kid)).join(', ');
  if (differing.length === 0 && unknown.length === 0) {
    const detail =
      entries.length === 0
        ? `The bundle carries no key; every signature is checked with the keys ${where}.`
        : `The keys the bundle carries (${kids}) equal the keys ${where}, kid for kid; every signature is ` +
          'checked with those pinned keys.';
    return { ...check('bundle_keys', true, 'Bundle keys', detail), differing, unknown };
  }
  const problems = [
    ...differing.map((kid) => `the key it carries as ${JSON.stringify(kid)} is not the one ${where}`),
    ...unknown.map((kid) => `${JSON.stringify(kid)} is ${source === null ? 'not published by this service' : `not in ${source}`}`),
  ];
  const detail =
    `The bundle's keys are not ${owner}: ${problems.join('; ')}. Anyone can make a key and sign a bundle with it, ` +
    'so the signatures are checked with the pinned keys instead.';
  return { ...check('bundle_keys', false, 'Bundle keys', detail), differing, unknown };
}

// ---------------------------------------------------------------- inputs

export function isReceiptId(text) {
  return RECEIPT_ID_RE.test(text);
}

/** Compare a locally computed "sha256:<hex>" with a receipt field; a readable check. */
export function fileHashCheck(field, fileName, computed, expected) {
  const label = field === 'input_hash' ? 'Input file hash' : 'Output file hash';
  if (typeof expected !== 'string') {
    return check(
      field,
      false,
      label,
      `The receipt records no ${field}, so "${fileName}" cannot be matched to it.`,
    );
  }
  const ok = computed === expected;
  return check(
    field,
    ok,
    label,
    ok
      ? `"${fileName}" hashes to ${computed} in this browser, equal to the receipt's ${field}: this is the file the receipt is about.`
      : `"${fileName}" hashes to ${computed}, but the receipt's ${field} is ${expected}: this is not the file the receipt was issued for.`,
  );
}
