// A receipt as an in-toto attestation, for the verification page (docs/verify-page.md,
// "Attestations"), as a DOM-free ES module the Node.js tests import too. It mirrors
// receipts/attestation.py and receipts/sigstore.py:
//
// - the DSSE envelope: exactly payloadType (application/vnd.in-toto+json), payload (standard
//   base64 of the RFC 8785 bytes of an in-toto Statement v1 whose predicate is {receipt,
//   log_origin} and whose subject is the receipt's output_hash, else its input_hash) and one
//   signature {keyid, sig}: Ed25519 by the receipt's key over the DSSE PAE;
// - the Sigstore bundle v0.3: exactly mediaType, verificationMaterial ({publicKey: {hint}} and
//   at most one tlogEntries item) and dsseEnvelope; the entry proves the Rekor v2 dsse 0.0.2
//   leaf (RFC 8785 bytes, written from the same template as log_body) under a C2SP checkpoint.
//
// Reading is strict (AttestationError: the page says "could not verify"); what reads is then
// checked, and a value that does not hold is evidence (INVALID) with its reason.

import { b64urlDecodeStrict, findKey, isObject, jcs } from './verify-core.js';
import { keyKid } from './verify-keys.js';
import { concat, leafHash, LogProofError, openCheckpoint, parseVerifierKey, rootFromInclusion } from './verify-log.js';

export const PAYLOAD_TYPE = 'application/vnd.in-toto+json';
export const STATEMENT_TYPE = 'https://in-toto.io/Statement/v1';
export const PREDICATE_TYPE = 'https://github.com/execution-proof/execution-proof/attestation/receipt/v1';
export const BUNDLE_MEDIA_TYPE = 'application/vnd.dev.sigstore.bundle.v0.3+json';
export const ENVELOPE_MEMBERS = ['payloadType', 'payload', 'signatures'];
export const SIGSTORE_MEMBERS = ['mediaType', 'verificationMaterial', 'dsseEnvelope'];
// DER of an Ed25519 SubjectPublicKeyInfo (RFC 8410) before its 32 key bytes.
const SPKI_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]);
const ENTRY_MEMBERS = ['logIndex', 'logId', 'kindVersion', 'integratedTime', 'inclusionProof', 'canonicalizedBody'];
const PROOF_MEMBERS = ['logIndex', 'rootHash', 'treeSize', 'hashes', 'checkpoint'];
// A protobuf JSON int64 as the service writes it: a decimal string, no leading zero, 19 digits at most.
const DECIMAL_RE = /^(0|[1-9][0-9]{0,18})$/;
const HASH_SIZE = 32;
const ENC = new TextEncoder();

/** An envelope, Statement or Sigstore bundle that does not read (the message says which part). */
export class AttestationError extends Error {}

const has = (value, name) => Object.prototype.hasOwnProperty.call(value, name);

function exactly(value, members, where) {
  if (!isObject(value)) throw new AttestationError(`${where} is not a JSON object`);
  const unknown = Object.keys(value).filter((name) => !members.includes(name)).sort();
  if (unknown.length) throw new AttestationError(`${where} has unknown members: ${unknown.join(', ')}`);
  const missing = members.filter((name) => !has(value, name));
  if (missing.length) throw new AttestationError(`${where} has no ${missing.join(', ')}`);
}

// ---------------------------------------------------------------- encodings

function binary(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length; i += 0x8000) out += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return out;
}

/** Standard base64 with padding (RFC 4648's first alphabet): DSSE's and sigstore's encoding. */
export function b64(bytes) {
  return btoa(binary(bytes));
}

/** Strict standard base64: the one spelling b64 writes (attestation.unb64), else AttestationError. */
export function unb64(text, what) {
  if (typeof text !== 'string') throw new AttestationError(`${what} is not a string`);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) throw new AttestationError(`${what} is not standard base64`);
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  if (b64(bytes) !== text) throw new AttestationError(`${what} is not canonical standard base64`);
  return bytes;
}

/** The raw 32-byte key of an Ed25519 DER SubjectPublicKeyInfo. */
export function spkiRaw(der) {
  if (der.length !== SPKI_PREFIX.length + 32 || !SPKI_PREFIX.every((b, i) => der[i] === b)) {
    throw new AttestationError('not an Ed25519 SubjectPublicKeyInfo');
  }
  return der.slice(SPKI_PREFIX.length);
}

export function spkiDer(raw) {
  return concat(SPKI_PREFIX, raw);
}

function equal(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** RFC 8785 text of a Statement: objects, lists, strings and nulls (a receipt holds no numbers). */
export function jcsJson(value) {
  if (Array.isArray(value)) return '[' + value.map(jcsJson).join(',') + ']';
  if (isObject(value)) {
    return '{' + Object.keys(value).sort().map((k) => jcs(k) + ':' + jcsJson(value[k])).join(',') + '}';
  }
  return jcs(value);
}

/** DSSE v1's pre-authentication encoding: what the envelope's signature signs. */
export function pae(payloadType, payload) {
  const type = ENC.encode(payloadType);
  return concat(ENC.encode(`DSSEv1 ${type.length} ${payloadType} ${payload.length} `), payload);
}

/** The RFC 8785 bytes of the Rekor v2 dsse 0.0.2 body (attestation.log_body's template). */
export function logBody(payloadHash, signature, publicKey) {
  return ENC.encode(
    '{"apiVersion":"0.0.2","kind":"dsse","spec":{"dsseV002":{"payloadHash":{"algorithm":"SHA2_256","digest":"' +
      b64(payloadHash) +
      '"},"signatures":[{"content":"' +
      b64(signature) +
      '","verifier":{"keyDetails":"PKIX_ED25519","publicKey":{"rawBytes":"' +
      b64(spkiDer(publicKey)) +
      '"}}}]}}}',
  );
}

async function sha256(bytes) {
  return new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', bytes));
}

/** The C2SP key hash of a log's Ed25519 key: sigstore's checkpointKeyId and logId. */
export async function checkpointKeyId(origin, publicKey) {
  return sha256(concat(ENC.encode(origin + '\n'), Uint8Array.of(1), publicKey));
}

// ---------------------------------------------------------------- reading

/** The receipt's subject: its output_hash (name output), else its input_hash (name input). */
function subjectOf(receipt) {
  const [name, digest] = receipt.output_hash !== null && receipt.output_hash !== undefined ? ['output', receipt.output_hash] : ['input', receipt.input_hash];
  if (typeof digest !== 'string' || !digest.startsWith('sha256:')) {
    throw new AttestationError(`the predicate's receipt has no subject: its ${name}_hash is not a sha256: value`);
  }
  return [{ name, digest: { sha256: digest.slice(7) } }];
}

/** The Statement a payload holds (attestation.parse_statement): {statement, receipt, logOrigin}. */
export function readStatement(payload) {
  let value;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(payload));
  } catch (err) {
    throw new AttestationError(`the payload is not JSON: ${err instanceof Error ? err.message : err}`);
  }
  if (!isObject(value)) throw new AttestationError('the payload is not an in-toto Statement');
  exactly(value, ['_type', 'subject', 'predicateType', 'predicate'], 'the payload (an in-toto Statement)');
  if (value._type !== STATEMENT_TYPE || value.predicateType !== PREDICATE_TYPE) {
    throw new AttestationError("the payload is not a receipt's in-toto Statement v1");
  }
  if (!isObject(value.predicate)) throw new AttestationError('the predicate is not an object');
  exactly(value.predicate, ['receipt', 'log_origin'], 'the predicate');
  const { receipt, log_origin: logOrigin } = value.predicate;
  if (!isObject(receipt) || !(logOrigin === null || typeof logOrigin === 'string')) {
    throw new AttestationError("the predicate's receipt is not an object, or its log_origin not a string");
  }
  let canonical;
  try {
    if (jcsJson(value.subject) !== jcsJson(subjectOf(receipt))) {
      throw new AttestationError("the Statement's subject is not its receipt's output_hash (else input_hash)");
    }
    canonical = ENC.encode(jcsJson(value));
  } catch (err) {
    if (err instanceof AttestationError) throw err;
    throw new AttestationError(`the payload holds a value a receipt's Statement cannot (${err instanceof Error ? err.message : err})`);
  }
  if (!equal(canonical, payload)) throw new AttestationError('the payload is not in RFC 8785 form');
  return { statement: value, receipt, logOrigin };
}

/**
 * A DSSE envelope read strictly (attestation.parse_envelope, then its Statement):
 * {payload, keyid, signature, receipt, logOrigin}. The receipt's own shape is the caller's to read.
 */
export function readEnvelope(value, where = 'The DSSE envelope') {
  if (!isObject(value)) throw new AttestationError(`${where} is not a JSON object`);
  exactly(value, ENVELOPE_MEMBERS, where);
  if (value.payloadType !== PAYLOAD_TYPE) throw new AttestationError(`${where}'s payloadType is not ${PAYLOAD_TYPE}`);
  const signatures = value.signatures;
  if (!Array.isArray(signatures) || signatures.length !== 1) throw new AttestationError(`${where} has not exactly one signature`);
  const [one] = signatures;
  exactly(one, ['keyid', 'sig'], `${where}'s signature`);
  if (typeof one.keyid !== 'string') throw new AttestationError(`${where}'s keyid is not a string`);
  const signature = unb64(one.sig, `${where}'s sig`);
  if (signature.length !== 64) throw new AttestationError(`${where}'s sig is not 64 bytes`);
  const payload = unb64(value.payload, `${where}'s payload`);
  const { receipt, logOrigin } = readStatement(payload);
  return { payload, keyid: one.keyid, signature, receipt, logOrigin };
}

function decimal(text, what) {
  if (typeof text !== 'string' || !DECIMAL_RE.test(text)) throw new AttestationError(`${what} is not a decimal string`);
  return BigInt(text);
}

function hash(text, what) {
  const bytes = unb64(text, what);
  if (bytes.length !== HASH_SIZE) throw new AttestationError(`${what} is not ${HASH_SIZE} bytes`);
  return bytes;
}

function readEntry(entry) {
  exactly(entry, ENTRY_MEMBERS, 'The tlog entry');
  exactly(entry.logId, ['keyId'], "The tlog entry's logId");
  exactly(entry.kindVersion, ['kind', 'version'], "The tlog entry's kindVersion");
  if (entry.kindVersion.kind !== 'dsse' || entry.kindVersion.version !== '0.0.2') {
    throw new AttestationError('The tlog entry is not of kind dsse 0.0.2 (this page reads no other)');
  }
  const proof = entry.inclusionProof;
  exactly(proof, PROOF_MEMBERS, "The tlog entry's inclusionProof");
  exactly(proof.checkpoint, ['envelope'], "The inclusionProof's checkpoint");
  if (typeof proof.checkpoint.envelope !== 'string') throw new AttestationError("The inclusionProof's checkpoint envelope is not a string");
  if (!Array.isArray(proof.hashes)) throw new AttestationError("The inclusionProof's hashes is not a list");
  decimal(entry.integratedTime, "The tlog entry's integratedTime");
  return {
    logIndex: decimal(entry.logIndex, "The tlog entry's logIndex"),
    logId: unb64(entry.logId.keyId, "The tlog entry's logId.keyId"),
    body: unb64(entry.canonicalizedBody, "The tlog entry's canonicalizedBody"),
    proofIndex: decimal(proof.logIndex, "The inclusionProof's logIndex"),
    treeSize: decimal(proof.treeSize, "The inclusionProof's treeSize"),
    rootHash: hash(proof.rootHash, "The inclusionProof's rootHash"),
    hashes: proof.hashes.map((h, i) => hash(h, `The inclusionProof's hashes[${i}]`)),
    checkpoint: proof.checkpoint.envelope,
  };
}

/**
 * A Sigstore bundle v0.3 read strictly (receipts/sigstore.py's shape): {attestation
 * (readEnvelope), hint, entry (null when it has no tlogEntries)}.
 */
export function readSigstoreBundle(value) {
  exactly(value, SIGSTORE_MEMBERS, 'The Sigstore bundle');
  if (value.mediaType !== BUNDLE_MEDIA_TYPE) {
    throw new AttestationError(`The Sigstore bundle's mediaType ${JSON.stringify(value.mediaType)} is not ${BUNDLE_MEDIA_TYPE}`);
  }
  const material = value.verificationMaterial;
  exactly(material, has(material || {}, 'tlogEntries') ? ['publicKey', 'tlogEntries'] : ['publicKey'], "The Sigstore bundle's verificationMaterial");
  exactly(material.publicKey, ['hint'], "The Sigstore bundle's verificationMaterial.publicKey");
  if (typeof material.publicKey.hint !== 'string') throw new AttestationError("The Sigstore bundle's publicKey.hint is not a string");
  let entry = null;
  if (has(material, 'tlogEntries')) {
    if (!Array.isArray(material.tlogEntries) || material.tlogEntries.length !== 1) {
      throw new AttestationError("The Sigstore bundle's tlogEntries is not a list of exactly one entry");
    }
    entry = readEntry(material.tlogEntries[0]);
  }
  return { attestation: readEnvelope(value.dsseEnvelope, "The Sigstore bundle's dsseEnvelope"), hint: material.publicKey.hint, entry };
}

/** A sigstore key file (trust-root --sigstore DIR writes DIR/keys.json): kid -> base64 DER SPKI, as a key set. */
export function readSigstoreKeys(value) {
  if (!isObject(value) || Object.keys(value).length === 0) throw new AttestationError('a sigstore key file maps kids to keys');
  const keys = Object.entries(value).map(([kid, spki]) => {
    if (!/^[A-Za-z0-9._-]{1,64}$/.test(kid)) throw new AttestationError(`${JSON.stringify(kid)} is not a kid`);
    let raw;
    try {
      raw = spkiRaw(unb64(spki, 'it'));
    } catch (err) {
      throw new AttestationError(`the key of ${JSON.stringify(kid)}: ${err.message}`);
    }
    // A certified key's kid names its key: one that does not is another key under its name.
    if (kid.startsWith('key-') && kid !== keyKid(raw)) throw new AttestationError(`${JSON.stringify(kid)} is not the kid of its key (${keyKid(raw)})`);
    return { kid, alg: 'Ed25519', public_key_base64url: b64urlEncodeRaw(raw) };
  });
  return { keys, active_kid: keys[0].kid };
}

function b64urlEncodeRaw(raw) {
  return b64(raw).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

// ---------------------------------------------------------------- checks

function check(id, ok, title, detail, reason) {
  return { id, ok, title, detail, reason };
}

/** The raw key of `kid` in a key set (the one the receipt's signature was checked with), or null. */
export function rawKey(keySet, kid) {
  const found = findKey(keySet, kid);
  if (found === null || found.entry.alg !== 'Ed25519') return null;
  try {
    return b64urlDecodeStrict(found.entry.public_key_base64url, 32);
  } catch {
    return null;
  }
}

/**
 * The envelope's signature (INVALID bad_signature when it fails): its keyid is the receipt's
 * sig_kid, a Sigstore bundle's hint is that keyid, and the Ed25519 signature over the PAE
 * verifies with the receipt's key (`key`: raw bytes, null when there is none at hand: then the
 * signature is not checked, the key check says why, and `missing` names a missing certificate).
 * A keyid or hint that is not the receipt's is evidence with or without a key.
 */
export async function attestationCheck(attestation, receipt, key, { hint, missing } = {}) {
  const title = 'Attestation signature';
  const faults = [];
  if (attestation.keyid !== receipt.sig_kid) {
    faults.push(`its keyid ${JSON.stringify(attestation.keyid)} is NOT the receipt's sig_kid ${JSON.stringify(receipt.sig_kid)}`);
  }
  if (hint !== undefined && hint !== receipt.sig_kid) {
    faults.push(`the Sigstore bundle's publicKey.hint ${JSON.stringify(hint)} is NOT the receipt's sig_kid`);
  }
  if (faults.length) return check('attestation_signature', false, title, `The envelope is not signed under the receipt's key: ${faults.join('; ')}.`, 'bad_signature');
  if (key === null) {
    const why = missing || 'there is no usable public key for this receipt.';
    return { ...check('attestation_signature', false, title, `Not checked: ${why}`, missing ? 'no_key_certificate' : 'bad_signature'), unchecked: true };
  }
  let ok = false;
  try {
    const subtle = globalThis.crypto.subtle;
    const imported = await subtle.importKey('raw', key, { name: 'Ed25519' }, false, ['verify']);
    ok = await subtle.verify({ name: 'Ed25519' }, imported, attestation.signature, pae(PAYLOAD_TYPE, attestation.payload));
  } catch {
    ok = false;
  }
  const detail = ok
    ? `The DSSE envelope's Ed25519 signature over its payload (the receipt's in-toto Statement) verifies with the receipt's key "${receipt.sig_kid}".`
    : `The DSSE envelope's signature does NOT verify with the receipt's key "${receipt.sig_kid}": the Statement or its signature was changed, or another key made it.`;
  return check('attestation_signature', ok, title, detail, 'bad_signature');
}

/**
 * A bundle's `attestation` against the bundle (INVALID bad_signature when it fails): its
 * Statement holds the bundle's own receipt (the same JSON value) and names the bundle's log
 * origin. A bundle without `log` is read as one of a service without a log: the origin is then
 * not compared (a pinned log's rule decides, no_log_proof), and the line says which log the
 * Statement names.
 */
export function attestationReceiptCheck(attestation, bundle) {
  const title = 'Attestation receipt';
  const origin = bundle.log ? bundle.log.origin : undefined;
  if (jcsJson(attestation.receipt) !== jcsJson(bundle.receipt)) {
    return check('attestation_receipt', false, title, "The bundle's attestation carries ANOTHER receipt than the bundle's.", 'bad_signature');
  }
  if (origin !== undefined && attestation.logOrigin !== origin) {
    const named = JSON.stringify(attestation.logOrigin);
    return check('attestation_receipt', false, title, `The bundle's attestation names ANOTHER log (${named}) than the bundle's (${JSON.stringify(origin)}).`, 'bad_signature');
  }
  const detail =
    origin === undefined
      ? `The bundle's attestation carries the bundle's receipt (and names the log ${JSON.stringify(attestation.logOrigin)}; the bundle has no log member).`
      : "The bundle's attestation carries the bundle's receipt and names its log.";
  return check('attestation_receipt', true, title, detail);
}

/**
 * The key the attestation's signature is checked with: the receipt's own, as its checks
 * (`checks`, with a key_certificate line under a version 2 trust root) chose it: {key (raw
 * bytes, or null), missing (why none is at hand: no certificate, or null)}.
 */
export function attestationKey(receipt, keySet, checks) {
  if (checks.some((c) => c.id === 'key_certificate' && c.state === 'no_key_certificate')) {
    const missing = `no certificate for the receipt's key "${receipt.sig_kid}" is at hand, so nothing makes it the service's key.`;
    return { key: null, missing };
  }
  return { key: rawKey(keySet, receipt.sig_kid), missing: null };
}

/** The attestation checks of a read document (verify-read.js): a bundle's member is also held to the bundle. */
export async function documentAttestationChecks(doc, receipt, key) {
  const hint = doc.sigstore ? doc.sigstore.hint : undefined;
  const checks = [await attestationCheck(doc.attestation, receipt, key.key, { hint, missing: key.missing })];
  if (doc.bundle) checks.push(attestationReceiptCheck(doc.attestation, doc.bundle));
  return checks;
}

/** The raw key a dsse 0.0.2 body names (its one verifier's DER SPKI); an AttestationError when it names none. */
function bodyKey(body) {
  let value;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
    return spkiRaw(unb64(value.spec.dsseV002.signatures[0].verifier.publicKey.rawBytes, 'publicKey.rawBytes'));
  } catch (err) {
    throw new AttestationError(`canonicalizedBody is not a dsse 0.0.2 body (${err.message})`);
  }
}

/**
 * A Sigstore bundle's tlog entry against a log (`vkeyText`, its C2SP verifier key, whose name is
 * the origin; `keyFrom` says where it comes from): the `log` check, in the library's order, the
 * first failure deciding (docs/verdicts.md, "Attestations"): the checkpoint in
 * inclusionProof.checkpoint.envelope is signed by the log key with its origin
 * (bad_checkpoint_signature); logId is the log's C2SP key hash, inclusionProof.logIndex the
 * entry's logIndex, treeSize and rootHash the checkpoint's, canonicalizedBody the dsse body
 * recomputed from the envelope and the receipt's `key` (null, none at hand: the key the body
 * names, which the key check judges), and SHA-256(0x00 || body) at logIndex under the
 * checkpoint's root (bad_log_proof). Returns {check, note (the checkpoint, for the quorum)}.
 */
export async function sigstoreEntryCheck(entry, attestation, key, vkeyText, keyFrom) {
  const title = 'Transparency log';
  const fail = (reason, message) => {
    const what = reason === 'bad_checkpoint_signature' ? 'The checkpoint is not signed by the log key' : 'Not shown to be in the log';
    return { check: check('log', false, title, `${what} ${keyFrom}: ${message}.`, reason), note: entry.checkpoint };
  };
  let vkey;
  let checkpoint;
  try {
    vkey = parseVerifierKey(vkeyText);
    checkpoint = await openCheckpoint(entry.checkpoint, vkey);
  } catch (err) {
    return fail('bad_checkpoint_signature', `the entry's checkpoint is not signed by the log key: ${err.message}`);
  }
  if (!equal(entry.logId, await checkpointKeyId(vkey.name, vkey.key))) {
    return fail('bad_log_proof', `the entry's logId is not the key hash of the log ${vkey.name}`);
  }
  if (entry.proofIndex !== entry.logIndex) {
    return fail('bad_log_proof', `inclusionProof.logIndex ${entry.proofIndex} is not the entry's logIndex ${entry.logIndex}`);
  }
  if (entry.treeSize !== BigInt(checkpoint.size) || !equal(entry.rootHash, checkpoint.root)) {
    return fail('bad_log_proof', "inclusionProof.treeSize and rootHash are not the signed checkpoint's");
  }
  let named;
  try {
    named = key === null ? bodyKey(entry.body) : key;
  } catch (err) {
    return fail('bad_log_proof', err.message);
  }
  if (!equal(entry.body, logBody(await sha256(attestation.payload), attestation.signature, named))) {
    return fail('bad_log_proof', "canonicalizedBody is not this attestation's dsse 0.0.2 body (the payload's SHA-256, its signature and the receipt's key)");
  }
  const index = Number(entry.logIndex);
  try {
    const root = await rootFromInclusion(await leafHash(entry.body), index, checkpoint.size, entry.hashes);
    if (!equal(root, checkpoint.root)) throw new LogProofError('bad_log_proof', "the inclusion proof does not lead to the checkpoint's root");
  } catch (err) {
    return fail('bad_log_proof', `the attestation's leaf is not at index ${index} of the signed tree: ${err.message}`);
  }
  const detail =
    `The attestation's leaf (a dsse 0.0.2 entry whose body is this envelope's) is in the log at index ${index}, right ` +
    `after the receipt's own entry, under a checkpoint of size ${checkpoint.size} signed by ${checkpoint.origin} (the ` +
    `log key ${keyFrom}, logId its key hash)` +
    (key === null ? ", with the key the entry names (the key check says whether it is the receipt's)." : '.') +
    ' The service cannot remove it, or show someone a history without it, without signing two inconsistent ' +
    'checkpoints. It does not prove when the receipt was made.';
  return { check: check('log', true, title, detail), note: entry.checkpoint };
}
