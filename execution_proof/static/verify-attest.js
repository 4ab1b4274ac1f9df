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
import { leafHash, LogProofError, openCheckpoint, parseVerifierKey, rootFromInclusion } from './verify-log.js';

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
const DECIMAL_RE = /^(0|[1-9][0-9]*)$/;
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

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
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
  if (typeof text !== 'string' || !DECIMAL_RE.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new AttestationError(`${what} is not a decimal string`);
  }
  return Number(text);
}

function readEntry(entry) {
  exactly(entry, ENTRY_MEMBERS, 'The tlog entry');
  exactly(entry.logId, ['keyId'], "The tlog entry's logId");
  exactly(entry.kindVersion, ['kind', 'version'], "The tlog entry's kindVersion");
  const { kind, version } = entry.kindVersion;
  if (typeof kind !== 'string' || typeof version !== 'string') throw new AttestationError("The tlog entry's kindVersion is not two strings");
  const proof = entry.inclusionProof;
  exactly(proof, PROOF_MEMBERS, "The tlog entry's inclusionProof");
  exactly(proof.checkpoint, ['envelope'], "The inclusionProof's checkpoint");
  if (typeof proof.checkpoint.envelope !== 'string') throw new AttestationError("The inclusionProof's checkpoint envelope is not a string");
  if (!Array.isArray(proof.hashes)) throw new AttestationError("The inclusionProof's hashes is not a list");
  decimal(entry.integratedTime, "The tlog entry's integratedTime");
  return {
    logIndex: decimal(entry.logIndex, "The tlog entry's logIndex"),
    logId: unb64(entry.logId.keyId, "The tlog entry's logId.keyId"),
    kind,
    version,
    body: unb64(entry.canonicalizedBody, "The tlog entry's canonicalizedBody"),
    proofIndex: decimal(proof.logIndex, "The inclusionProof's logIndex"),
    treeSize: decimal(proof.treeSize, "The inclusionProof's treeSize"),
    rootHash: unb64(proof.rootHash, "The inclusionProof's rootHash"),
    hashes: proof.hashes.map((h, i) => unb64(h, `The inclusionProof's hashes[${i}]`)),
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
 * signature is not checked, and `missing` names why). `bundle`: the offline bundle that carries
 * the envelope ({receipt, origin}): its receipt and log origin must be the Statement's.
 */
export async function attestationCheck(attestation, receipt, key, { hint, bundle, missing } = {}) {
  const title = 'Attestation signature';
  const faults = [];
  if (bundle) {
    if (jcsJson(attestation.receipt) !== jcsJson(bundle.receipt)) faults.push("its Statement's receipt is not the bundle's receipt");
    if (attestation.logOrigin !== bundle.origin) {
      faults.push(`its Statement names the log ${JSON.stringify(attestation.logOrigin)}, and the bundle's log is ${JSON.stringify(bundle.origin)}`);
    }
  }
  if (attestation.keyid !== receipt.sig_kid) {
    faults.push(`its keyid ${JSON.stringify(attestation.keyid)} is not the receipt's sig_kid ${JSON.stringify(receipt.sig_kid)}`);
  }
  if (hint !== undefined && hint !== attestation.keyid) {
    faults.push(`the bundle's publicKey.hint ${JSON.stringify(hint)} is not the envelope's keyid`);
  }
  if (faults.length) return check('attestation_signature', false, title, `The attestation does not belong to this receipt: ${faults.join('; ')}.`, 'bad_signature');
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
    : `The DSSE envelope's signature does not verify with the receipt's key "${receipt.sig_kid}": the Statement or its signature was changed, or another key made it.`;
  return check('attestation_signature', ok, title, detail, 'bad_signature');
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

/** The attestation check of a read document (verify-read.js): a bundle's also names its receipt and log origin. */
export function documentAttestationCheck(doc, receipt, key) {
  const bundle = doc.bundle ? { receipt: doc.bundle.receipt, origin: doc.bundle.log ? doc.bundle.log.origin : null } : undefined;
  const hint = doc.sigstore ? doc.sigstore.hint : undefined;
  return attestationCheck(doc.attestation, receipt, key.key, { hint, bundle, missing: key.missing });
}

/**
 * A Sigstore bundle's tlog entry against a log (`vkeyText`, its C2SP verifier key, whose name
 * is the origin): two checks, `log_entry` (kindVersion dsse 0.0.2, logId the log's key hash,
 * canonicalizedBody the body recomputed from the envelope and `key`) and `log` (the checkpoint
 * signed by the log key, rootHash / treeSize / logIndex equal to the checkpoint's and the
 * entry's, the leaf's inclusion), each failing with its reason (bad_log_proof,
 * bad_checkpoint_signature); `keyFrom` says where the log key comes from.
 */
export async function sigstoreEntryChecks(entry, attestation, key, vkeyText, keyFrom, missing) {
  const faults = [];
  let unchecked = false;
  if (entry.kind !== 'dsse' || entry.version !== '0.0.2') faults.push(`its kindVersion is ${entry.kind} ${entry.version}, not dsse 0.0.2`);
  let vkey = null;
  try {
    vkey = parseVerifierKey(vkeyText);
  } catch (err) {
    faults.push(`the log key ${keyFrom} cannot be read (${err.message})`);
  }
  if (vkey !== null && !equal(entry.logId, await checkpointKeyId(vkey.name, vkey.key))) {
    faults.push(`its logId is not the key hash of the log ${vkey.name} (the log key ${keyFrom})`);
  }
  if (key === null) {
    unchecked = true;
  } else if (!equal(entry.body, logBody(await sha256(attestation.payload), attestation.signature, key))) {
    faults.push("its canonicalizedBody is not the dsse 0.0.2 body of this envelope (the payload's SHA-256, its signature and the receipt's key)");
  }
  const entryCheck = faults.length
    ? check('log_entry', false, 'Log entry', `The tlog entry is not this attestation's in this log: ${faults.join('; ')}.`, 'bad_log_proof')
    : unchecked
      ? {
          ...check(
            'log_entry',
            false,
            'Log entry',
            `The tlog entry's canonicalizedBody was not compared with the envelope: ${missing || 'there is no usable public key for this receipt.'}`,
            missing ? 'no_key_certificate' : 'bad_signature',
          ),
          unchecked: true,
        }
      : check(
          'log_entry',
          true,
          'Log entry',
          `A dsse 0.0.2 entry of the log ${vkey.name} (logId its key hash), whose body is this envelope's: the payload's SHA-256, its signature and the receipt's key.`,
        );
  if (vkey === null) return { checks: [entryCheck], note: entry.checkpoint };
  let logCheck;
  try {
    const checkpoint = await openCheckpoint(entry.checkpoint, vkey);
    const wrong = [];
    if (entry.proofIndex !== entry.logIndex) wrong.push(`inclusionProof.logIndex ${entry.proofIndex} is not the entry's logIndex ${entry.logIndex}`);
    if (entry.treeSize !== checkpoint.size) wrong.push(`treeSize ${entry.treeSize} is not the checkpoint's size ${checkpoint.size}`);
    if (!equal(entry.rootHash, checkpoint.root)) wrong.push("rootHash is not the checkpoint's root hash");
    if (wrong.length) throw new LogProofError('bad_log_proof', `the inclusion proof does not describe its checkpoint: ${wrong.join('; ')}`);
    let root;
    try {
      root = await rootFromInclusion(await leafHash(entry.body), entry.logIndex, checkpoint.size, entry.hashes);
    } catch (err) {
      throw new LogProofError('bad_log_proof', err.message);
    }
    if (!equal(root, checkpoint.root)) throw new LogProofError('bad_log_proof', "the inclusion proof does not lead to the checkpoint's root");
    const detail =
      `The attestation's leaf is in the log at index ${entry.logIndex} (right after the receipt's own entry), under a ` +
      `checkpoint of size ${checkpoint.size} signed by ${checkpoint.origin} (the log key ${keyFrom}). The service cannot ` +
      'remove it, or show someone a history without it, without signing two inconsistent checkpoints. It does not ' +
      'prove when the receipt was made.';
    logCheck = check('log', true, 'Transparency log', detail);
  } catch (err) {
    const reason = err instanceof LogProofError ? err.reason : 'bad_log_proof';
    const what = reason === 'bad_checkpoint_signature' ? 'The checkpoint is not signed by the log key' : "Not shown to be in the log";
    logCheck = check('log', false, 'Transparency log', `${what} ${keyFrom}: ${err.message}.`, reason);
  }
  return { checks: [entryCheck, logCheck], note: entry.checkpoint };
}
