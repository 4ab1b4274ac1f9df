// What the verification page is given, read strictly (docs/verify-page.md, "What a document
// is"), as a DOM-free ES module the Node.js tests import too. One reader per shape, as the
// library's: a document is a bundle exactly when it has a `format` member, and then it must be
// a well-formed bundle of a known format and version; without `format` it is a bare receipt, a
// GET /v1/receipts/{id} body or a saved create response, each read against its own member
// list. Whatever does not read is "could not verify", never checked as something else: a
// one-byte change to `format` must not turn a bundle, whose log proof a pinned log requires,
// into a receipt whose proof is not looked for.
//
// A receipt's attestation (verify-attest.js) is a document too: a DSSE envelope (exactly
// payloadType, payload, signatures) or a Sigstore bundle v0.3 (exactly mediaType,
// verificationMaterial, dsseEnvelope), whose Statement's receipt is read as a bare receipt; a
// version 2 bundle may carry the envelope as `attestation`.
//
// The pinned material ("Saved key set") is a GET /v1/public-key body, the sigstore key file
// (kid -> DER SPKI, as `execution-proof trust-root --sigstore DIR` writes DIR/keys.json) or a
// trust root (docs/trust-root.md, version 1 or 2), read as strictly as the library's
// parse_trust_root reads it.

import {
  AttestationError,
  ENVELOPE_MEMBERS,
  readEnvelope,
  readSigstoreBundle,
  readSigstoreKeys,
  SIGSTORE_MEMBERS,
} from './verify-attest.js';
import { b64urlDecodeStrict, isObject, isReceiptId } from './verify-core.js';
import { KeyDocumentError, readCertificate, readRevocation, rootKid, signedBy } from './verify-keys.js';
import { parsePolicy, parseVkey } from './verify-log.js';

export const BUNDLE_FORMAT = 'eps-receipt-bundle';
// Version 2 (what the service writes): each entry of `keys` carries its key certificate.
export const BUNDLE_VERSION = 2;
export const BUNDLE_VERSIONS = [1, 2];
const TEXT = ['receipt_id', 'project_id', 'actor_id', 'created_at', 'input_hash', 'status', 'receipt_hash', 'signature', 'sig_kid'];
const NULLABLE = [
  'output_hash',
  'params_hash',
  'env_hash',
  'code_ref',
  'run_id',
  'receipt_kind',
  'prev_receipt_hash',
  'chain_status',
  'expected_prev_receipt_hash',
];
export const RECEIPT_MEMBERS = [...TEXT, ...NULLABLE, 'tags'];
const BUNDLE_REQUIRED = ['format', 'version', 'created_at', 'service', 'receipt', 'keys', 'chain', 'chain_complete'];
// The optional members of each version; any other member is refused. Version 2 may carry
// the receipt's attestation (its DSSE envelope).
const BUNDLE_OPTIONAL = { 1: ['log', 'timestamps'], 2: ['log', 'timestamps', 'attestation'] };
// Members a bundle has and no other document: without `format`, a bundle that lost it.
const BUNDLE_ONLY = ['keys', 'timestamps', 'chain_complete', 'version'];
const LOG_MEMBERS = ['origin', 'log_vkey', 'proof'];
// A read's body (ok, receipt) and a create's reply as `execution-proof submit --save` keeps it.
const RESPONSE_MEMBERS = ['ok', 'receipt', 'idempotency', 'chain', 'quota', 'log', 'service_url', 'salts'];
const SALTED = ['input', 'output', 'params', 'env'];
const MAX_TRUST_ROOT_BYTES = 1 << 20;

/** A document or pinned file that cannot be read: the page says "could not verify" with the message. */
export class ReadError extends Error {}

const has = (value, name) => Object.prototype.hasOwnProperty.call(value, name);
const names = (list) => list.join(', ');

function unknownMembers(value, allowed) {
  return Object.keys(value).filter((name) => !allowed.includes(name)).sort();
}

/** What keeps `value` from being a receipt object (docs/receipt-format.md), or null. */
export function receiptFault(value) {
  if (!isObject(value)) return 'it is not a JSON object';
  const unknown = unknownMembers(value, RECEIPT_MEMBERS);
  if (unknown.length) return `it has unknown members: ${names(unknown)}`;
  for (const name of TEXT) {
    if (!has(value, name)) return `it has no ${name}`;
    if (typeof value[name] !== 'string') return `its ${name} is not a string`;
  }
  for (const name of [...NULLABLE, 'tags']) if (!has(value, name)) return `it has no ${name}`;
  for (const name of NULLABLE) {
    if (value[name] !== null && typeof value[name] !== 'string') return `its ${name} is neither a string nor null`;
  }
  const tags = value.tags;
  if (tags !== null && !(isObject(tags) && Object.values(tags).every((t) => typeof t === 'string'))) {
    return 'its tags are not an object of strings (nor null)';
  }
  return null;
}

function readReceipt(value, where) {
  const fault = receiptFault(value);
  if (fault) throw new ReadError(`${where} is not a receipt: ${fault}.`);
  return value;
}

function readBundleLog(log) {
  if (!isObject(log)) throw new ReadError('The bundle\'s "log" is not an object.');
  const unknown = unknownMembers(log, LOG_MEMBERS);
  const missing = LOG_MEMBERS.filter((name) => !has(log, name));
  if (unknown.length || missing.length) {
    const said = [...(unknown.length ? [`unknown members ${names(unknown)}`] : []), ...(missing.length ? [`no ${names(missing)}`] : [])];
    throw new ReadError(`The bundle's "log" has ${said.join(' and ')}.`);
  }
  if (typeof log.origin !== 'string' || typeof log.log_vkey !== 'string') {
    throw new ReadError('The bundle\'s "log" origin and log_vkey must be strings.');
  }
  if (log.proof !== null && typeof log.proof !== 'string') throw new ReadError('The bundle\'s log proof is neither a string nor null.');
  return log;
}

/** A version 2 bundle's keys: each entry carries its certificate, read strictly, for that very key. */
function readCertifiedKeys(keys) {
  if (!Array.isArray(keys.keys) || !keys.keys.every(isObject)) throw new ReadError('The bundle\'s "keys" holds no list of key objects.');
  const lacking = keys.keys.filter((entry) => !isObject(entry.certificate)).map((entry) => String(entry.kid));
  if (lacking.length) {
    throw new ReadError(`A version 2 bundle carries each key's certificate, and ${names(lacking)} has none: it is malformed.`);
  }
  for (const entry of keys.keys) {
    let certificate;
    try {
      certificate = readCertificate(entry.certificate);
    } catch (err) {
      if (err instanceof KeyDocumentError) throw new ReadError(`The bundle's key ${JSON.stringify(entry.kid)}: ${err.message}.`);
      throw err;
    }
    if (certificate.kid !== entry.kid) throw new ReadError(`The bundle's key ${JSON.stringify(entry.kid)} carries the certificate of another key.`);
  }
  if (has(keys, 'revocations') && !(Array.isArray(keys.revocations) && keys.revocations.every(isObject))) {
    throw new ReadError('The bundle\'s keys.revocations is not a list of objects.');
  }
}

/** A bundle (docs/bundles.md): its format and version known, every required member of its type, nothing unknown. */
export function readBundle(value) {
  if (value.format !== BUNDLE_FORMAT) {
    throw new ReadError(`This is no document this page reads: its format is ${JSON.stringify(value.format)}, not "${BUNDLE_FORMAT}".`);
  }
  const version = value.version;
  if (Number.isInteger(version) && version > BUNDLE_VERSION) {
    throw new ReadError(
      `This bundle is version ${version}, made by a newer version of the service than this page reads (up to version ${BUNDLE_VERSION}): ` +
        'check it with a current execution-proof verify.',
    );
  }
  if (!BUNDLE_VERSIONS.includes(version)) {
    throw new ReadError(`This bundle's version ${JSON.stringify(version)} is not one this page reads (${BUNDLE_VERSIONS.join(' or ')}).`);
  }
  const missing = BUNDLE_REQUIRED.filter((name) => !has(value, name));
  if (missing.length) throw new ReadError(`The bundle has no ${names(missing)}: it is malformed.`);
  const unknown = unknownMembers(value, [...BUNDLE_REQUIRED, ...BUNDLE_OPTIONAL[version]]);
  if (unknown.length) throw new ReadError(`The bundle has unknown members: ${names(unknown)}. They are refused, not ignored: a bundle of this version has no other member.`);
  for (const name of ['created_at', 'service']) {
    if (typeof value[name] !== 'string') throw new ReadError(`The bundle's "${name}" is not a string.`);
  }
  if (!isObject(value.keys)) throw new ReadError('The bundle\'s "keys" is not an object.');
  if (version === 2) readCertifiedKeys(value.keys);
  if (typeof value.chain_complete !== 'boolean') throw new ReadError('The bundle\'s "chain_complete" is not true or false.');
  readReceipt(value.receipt, 'The bundle\'s "receipt"');
  if (!Array.isArray(value.chain)) throw new ReadError('The bundle\'s "chain" is not a list.');
  value.chain.forEach((entry, i) => readReceipt(entry, `The bundle's chain[${i}]`));
  if (has(value, 'log')) readBundleLog(value.log);
  if (has(value, 'timestamps')) {
    if (!has(value, 'log')) throw new ReadError('The bundle has "timestamps" but no "log".');
    if (!Array.isArray(value.timestamps) || !value.timestamps.every(isObject)) {
      throw new ReadError('The bundle\'s "timestamps" is not a list of objects.');
    }
  }
  const attestation = has(value, 'attestation') ? attested(() => readEnvelope(value.attestation, 'The bundle\'s "attestation"')) : null;
  return {
    shape: 'bundle',
    receipt: value.receipt,
    bundle: value,
    carriedProof: has(value, 'log') ? value.log.proof : undefined,
    attestation,
    sigstore: null,
  };
}

/** What a reader of verify-attest.js returns, its AttestationError a ReadError. */
function attested(read) {
  try {
    return read();
  } catch (err) {
    if (err instanceof AttestationError) throw new ReadError(`${err.message}: it is malformed.`);
    throw err;
  }
}

/**
 * A receipt's attestation: a DSSE envelope, or a Sigstore bundle v0.3 (which carries the
 * envelope and, from a service with a log, the log entry of its leaf). Its Statement's receipt
 * is read as a bare receipt is.
 */
function readAttestation(value) {
  const sigstore = SIGSTORE_MEMBERS.some((name) => has(value, name));
  const read = attested(() => (sigstore ? readSigstoreBundle(value) : { attestation: readEnvelope(value), hint: undefined, entry: null }));
  const where = sigstore ? "The Sigstore bundle's Statement's receipt" : "The envelope's Statement's receipt";
  return {
    shape: sigstore ? 'sigstore' : 'envelope',
    receipt: readReceipt(read.attestation.receipt, where),
    bundle: null,
    carriedProof: undefined,
    attestation: read.attestation,
    sigstore: sigstore ? { hint: read.hint, entry: read.entry } : null,
  };
}

function readResponse(value) {
  const unknown = unknownMembers(value, RESPONSE_MEMBERS);
  if (unknown.length) throw new ReadError(`Unknown members beside the receipt: ${names(unknown)}. They are refused, not ignored.`);
  if (has(value, 'ok') && value.ok !== true) throw new ReadError('Its "ok" is not true: a saved error reply holds no receipt.');
  for (const name of ['idempotency', 'chain', 'quota', 'log']) {
    if (has(value, name) && !isObject(value[name])) throw new ReadError(`Its "${name}" is not an object.`);
  }
  if (has(value, 'service_url') && typeof value.service_url !== 'string') throw new ReadError('Its "service_url" is not a string.');
  if (has(value, 'salts')) {
    const salts = value.salts;
    if (!isObject(salts) || !Object.entries(salts).every(([k, v]) => SALTED.includes(k) && typeof v === 'string')) {
      throw new ReadError('Its "salts" must map input, output, params or env to hex.');
    }
  }
  readReceipt(value.receipt, 'Its "receipt"');
  // A create answered with Prefer: wait carries its proof ({"index", "proof"}); the pending form does not.
  const proof = has(value, 'log') && typeof value.log.proof === 'string' ? value.log.proof : undefined;
  const shape = ['idempotency', 'chain', 'quota', 'log'].some((name) => has(value, name)) ? 'create' : 'get';
  return { shape, receipt: value.receipt, bundle: null, carriedProof: proof, attestation: null, sigstore: null };
}

/**
 * A parsed JSON document as {shape: 'bundle'|'receipt'|'get'|'create'|'envelope'|'sigstore',
 * receipt, bundle, carriedProof (the log proof it carries: a string, null for a bundle still
 * pending, undefined when it carries none), attestation (verify-attest.js readEnvelope: an
 * envelope's, a Sigstore bundle's or a bundle's `attestation`; else null), sigstore ({hint,
 * entry} of a Sigstore bundle; else null)}; a ReadError saying what is wrong otherwise.
 */
export function readDocument(value) {
  if (!isObject(value)) throw new ReadError('The JSON is not an object: neither a receipt, a receipt response nor a bundle.');
  if (has(value, 'format')) return readBundle(value);
  const stray = BUNDLE_ONLY.filter((name) => has(value, name));
  if (stray.length) {
    throw new ReadError(
      `This is a malformed bundle: it has ${names(stray)} but no "format" member (a bundle starts with "format": "${BUNDLE_FORMAT}").`,
    );
  }
  if (has(value, 'error') && !has(value, 'receipt')) {
    const message = isObject(value.error) ? value.error.message : value.error;
    throw new ReadError(`This is an error response, not a receipt: ${String(message)}.`);
  }
  if ([...SIGSTORE_MEMBERS, ...ENVELOPE_MEMBERS].some((name) => has(value, name))) return readAttestation(value);
  if (has(value, 'receipt')) return readResponse(value);
  if (!RECEIPT_MEMBERS.some((name) => has(value, name))) {
    throw new ReadError('The JSON is neither a receipt, a {ok, receipt} response, a receipt bundle nor an attestation.');
  }
  const receipt = readReceipt(value, 'The JSON');
  return { shape: 'receipt', receipt, bundle: null, carriedProof: undefined, attestation: null, sigstore: null };
}

/**
 * What the user typed or dropped: {kind: 'id', id} | {kind: 'document', document (readDocument)}
 * | {kind: 'invalid', message}.
 */
export function parseUserInput(text) {
  const trimmed = String(text || '').trim();
  if (trimmed === '') return { kind: 'invalid', message: 'Enter a receipt id, paste a receipt, or choose a bundle file.' };
  if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
    let value;
    try {
      value = JSON.parse(trimmed);
    } catch (err) {
      return { kind: 'invalid', message: `This is not valid JSON: ${err instanceof Error ? err.message : err}.` };
    }
    try {
      return { kind: 'document', document: readDocument(value) };
    } catch (err) {
      if (err instanceof ReadError) return { kind: 'invalid', message: err.message };
      throw err;
    }
  }
  if (isReceiptId(trimmed)) return { kind: 'id', id: trimmed };
  return { kind: 'invalid', message: 'This is neither a receipt id (rcpt_ followed by letters and digits) nor a JSON receipt.' };
}

// ---------------------------------------------------------------- pinned material

const KID_RE = /^[A-Za-z0-9._-]{1,64}$/;
const SERVICE_URL_RE = /^https?:\/\/[^/?#]+/;
const ORIGIN_RE = /^[^\s+]+$/;
const PEM_RE = /^\s*-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----\s*$/;
const TRUST_ROOT_MEMBERS = {
  1: ['version', 'service_url', 'receipt_keys', 'log', 'tsa_roots_pem'],
  2: ['version', 'service_url', 'receipt_roots', 'revocations', 'log', 'tsa_roots_pem'],
};
// Members only a trust root has (a GET /v1/public-key body may have revocations too).
const TRUST_ROOT_ONLY = ['service_url', 'receipt_keys', 'receipt_roots', 'log', 'tsa_roots_pem'];

function exactly(value, members, where) {
  const unknown = unknownMembers(value, members);
  if (unknown.length) throw new ReadError(`${where}: unknown members ${names(unknown)}`);
  const missing = members.filter((name) => !has(value, name));
  if (missing.length) throw new ReadError(`${where}: no ${names(missing)}`);
}

function sameBytes(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

async function readTrustRootLog(log) {
  if (log === null) return null;
  if (!isObject(log)) throw new ReadError('log: must be null or an object');
  exactly(log, ['origin', 'vkey', 'policy'], 'log');
  if (typeof log.origin !== 'string' || !ORIGIN_RE.test(log.origin)) throw new ReadError('log.origin: not a log origin');
  if (typeof log.vkey !== 'string') throw new ReadError('log.vkey: not a string');
  let key;
  try {
    key = await parseVkey(log.vkey, 0x01, 'verifier key');
  } catch (err) {
    throw new ReadError(`log.vkey: ${err.message}`);
  }
  if (key.name !== log.origin) throw new ReadError(`log.vkey: its name ${JSON.stringify(key.name)} is not log.origin`);
  if (typeof log.policy !== 'string' || log.policy === '') throw new ReadError('log.policy: not a policy');
  let policy;
  try {
    policy = await parsePolicy(log.policy);
  } catch (err) {
    throw new ReadError(`log.policy: ${err.message}`);
  }
  if (policy.logs.length !== 1) throw new ReadError(`log.policy: names ${policy.logs.length} logs, not exactly this one`);
  const named = policy.logs[0].key;
  if (named.name !== key.name || !sameBytes(named.keyId, key.keyId) || !sameBytes(named.key, key.key)) {
    throw new ReadError('log.policy: is the policy of another log');
  }
  return { origin: log.origin, vkey: log.vkey.trim(), policy, policyText: log.policy };
}

function readReceiptKeys(listed) {
  if (!Array.isArray(listed) || listed.length === 0 || listed.length > 256) throw new ReadError('receipt_keys: a list of 1 to 256 keys');
  const seen = new Set();
  listed.forEach((entry, i) => {
    const where = `receipt_keys[${i}]`;
    if (!isObject(entry)) throw new ReadError(`${where}: not an object`);
    exactly(entry, ['kid', 'public_key_base64url'], where);
    if (typeof entry.kid !== 'string' || !KID_RE.test(entry.kid)) throw new ReadError(`${where}.kid: 1-64 of A-Z a-z 0-9 . _ -`);
    if (seen.has(entry.kid)) throw new ReadError(`${where}.kid: duplicate kid ${JSON.stringify(entry.kid)}`);
    seen.add(entry.kid);
    try {
      b64urlDecodeStrict(entry.public_key_base64url, 32);
    } catch (err) {
      throw new ReadError(`${where}.public_key_base64url: ${err.message}`);
    }
  });
  return {
    keys: listed.map((k) => ({ kid: k.kid, alg: 'Ed25519', public_key_base64url: k.public_key_base64url })),
    active_kid: listed[0].kid,
  };
}

/** Version 2: the receipt roots (a Map of kid to raw key, in the file's order). */
function readReceiptRoots(listed) {
  if (!Array.isArray(listed) || listed.length === 0 || listed.length > 64) throw new ReadError('receipt_roots: a list of 1 to 64 roots');
  const roots = new Map();
  listed.forEach((entry, i) => {
    const where = `receipt_roots[${i}]`;
    if (!isObject(entry)) throw new ReadError(`${where}: not an object`);
    exactly(entry, ['kid', 'public_key_base64url'], where);
    let raw;
    try {
      raw = b64urlDecodeStrict(entry.public_key_base64url, 32);
    } catch (err) {
      throw new ReadError(`${where}.public_key_base64url: ${err.message}`);
    }
    if (entry.kid !== rootKid(raw)) throw new ReadError(`${where}.kid: must be its key's (${rootKid(raw)})`);
    if (roots.has(entry.kid)) throw new ReadError(`${where}.kid: duplicate root ${JSON.stringify(entry.kid)}`);
    roots.set(entry.kid, raw);
  });
  return roots;
}

/** Version 2: every pinned revocation read strictly and signed by a pinned root (the documents, as given). */
async function readPinnedRevocations(listed, roots) {
  if (!Array.isArray(listed) || listed.length > 1024) throw new ReadError('revocations: a list (empty: none pinned)');
  for (const [i, entry] of listed.entries()) {
    let revocation;
    try {
      revocation = readRevocation(entry);
    } catch (err) {
      if (err instanceof KeyDocumentError) throw new ReadError(`revocations[${i}]: ${err.message}`);
      throw err;
    }
    const root = roots.get(revocation.rootKid);
    if (!root) throw new ReadError(`revocations[${i}]: signed by ${revocation.rootKid}, which is not in receipt_roots`);
    if (!(await signedBy(revocation, root))) throw new ReadError(`revocations[${i}]: its signature does not verify with ${revocation.rootKid}`);
  }
  return listed;
}

/**
 * A trust root (docs/trust-root.md), version 1 or 2, read member by member; a ReadError naming
 * the first fault. Version 1 pins receipt keys (`keys`, a GET /v1/public-key body); version 2
 * pins receipt roots (`roots`, a Map of kid to raw key) and `revocations` (each checked against
 * them), and `keys` is null: the keys come from a bundle or the service.
 */
export async function readTrustRoot(document) {
  if (!isObject(document)) throw new ReadError('the trust root must be a JSON object');
  if (!has(document, 'version')) throw new ReadError('the trust root: no version');
  const version = document.version;
  if (version !== 1 && version !== 2) throw new ReadError(`version: must be 1 or 2, not ${JSON.stringify(version)}`);
  exactly(document, TRUST_ROOT_MEMBERS[version], `the trust root (version ${version})`);
  const url = document.service_url;
  if (typeof url !== 'string' || !SERVICE_URL_RE.test(url) || /\s/u.test(url)) {
    throw new ReadError(`service_url: must be an http(s) URL, not ${JSON.stringify(url)}`);
  }
  const keys = version === 1 ? readReceiptKeys(document.receipt_keys) : null;
  const roots = version === 2 ? readReceiptRoots(document.receipt_roots) : null;
  const revocations = version === 2 ? await readPinnedRevocations(document.revocations, roots) : [];
  const log = await readTrustRootLog(document.log);
  const tsa = document.tsa_roots_pem;
  if (!Array.isArray(tsa) || tsa.length > 64) throw new ReadError('tsa_roots_pem: a list of PEM certificates');
  tsa.forEach((pem, i) => {
    if (typeof pem !== 'string' || !PEM_RE.test(pem) || pem.split('-----BEGIN CERTIFICATE-----').length !== 2) {
      throw new ReadError(`tsa_roots_pem[${i}]: not one PEM certificate`);
    }
    if (tsa.indexOf(pem) !== i) throw new ReadError(`tsa_roots_pem[${i}]: the same certificate twice`);
  });
  return { kind: 'trust_root', version, keys, roots, revocations, log, tsaRoots: tsa.length, serviceUrl: url };
}

/** Whether a value has the shape of a GET /v1/public-key body (a saved key set). */
export function isKeySet(value) {
  return isObject(value) && Array.isArray(value.keys);
}

/**
 * The pinned material of the "Saved key set" file: {kind: 'keys' | 'trust_root', version (a
 * trust root's), keys (a GET /v1/public-key body; null for a version 2 trust root, which pins
 * `roots` and `revocations` instead), log (null, or {origin, vkey, policy, policyText}),
 * tsaRoots, name}.
 * A file that is neither is a ReadError (the page cannot verify with it).
 */
export async function readPinned(text, name) {
  if (new TextEncoder().encode(text).length > MAX_TRUST_ROOT_BYTES) throw new ReadError(`"${name}" is larger than 1 MiB.`);
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ReadError(`"${name}" is not a saved key set nor a trust root: it is not valid JSON.`);
  }
  if (isObject(value) && TRUST_ROOT_ONLY.some((member) => has(value, member))) {
    try {
      return { ...(await readTrustRoot(value)), name };
    } catch (err) {
      if (err instanceof ReadError) throw new ReadError(`"${name}" is not a usable trust root: ${err.message}.`);
      throw err;
    }
  }
  let keys = isKeySet(value) ? value : null;
  if (keys === null && isObject(value) && Object.keys(value).length > 0 && Object.values(value).every((v) => typeof v === 'string')) {
    try {
      keys = readSigstoreKeys(value);
    } catch (err) {
      if (err instanceof AttestationError) {
        throw new ReadError(`"${name}" is not a saved key set: read as the keys.json of execution-proof trust-root --sigstore DIR, ${err.message}.`);
      }
      throw err;
    }
  }
  if (keys === null) {
    throw new ReadError(
      `"${name}" is not a saved key set: expected the JSON of GET /v1/public-key ({"keys": […], "active_kid": …}), ` +
        'the keys.json of execution-proof trust-root --sigstore DIR, or a trust root (execution-proof trust-root).',
    );
  }
  return { kind: 'keys', version: null, keys, roots: null, revocations: [], log: null, tsaRoots: 0, name };
}
