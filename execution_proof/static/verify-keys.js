// Key certificates and revocations for the public page (docs/verify-page.md, "Receipt roots"),
// as a DOM-free ES module the Node.js tests import too. It follows receipts/key_certificates.py:
// a receipt root never signs a receipt; it signs a key certificate for each receipt key, and a
// revocation when a key must stop counting. Both are JSON objects signed like a receipt: Ed25519
// by the root over the RFC 8785 bytes of the object without `signature` (the same jcs() the
// page's receipt check uses). A receipt by `sig_kid` counts, under a version 2 trust root, when
// that key's certificate is signed by a pinned root, the receipt's created_at lies within
// not_before..not_after, and no revocation by the same root covers it.

import { b64urlDecodeStrict, isObject, jcs } from './verify-core.js';
import { Sha256 } from './sha256.js';

export const CERTIFICATE_TYPE = 'execution-proof-key-certificate/v1';
export const REVOCATION_TYPE = 'execution-proof-key-revocation/v1';
const CERTIFICATE_MEMBERS = ['type', 'kid', 'alg', 'public_key_base64url', 'not_before', 'not_after', 'root_kid', 'signature'];
const REVOCATION_MEMBERS = ['type', 'kid', 'revoked_after', 'reason', 'root_kid', 'signature'];
const TIME_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const KEY_KID_RE = /^key-[0-9a-f]{16}$/;
const ROOT_KID_RE = /^root-[0-9a-f]{16}$/;
const MAX_REASON = 200;

/** The states a key judged by pinned roots can be in: 'ok', a missing piece, or evidence. */
export const STATES = ['ok', 'no_key_certificate', 'unknown_root', 'bad_certificate', 'outside_certificate', 'revoked'];

/** A certificate or revocation that is not well formed (the message says which part). */
export class KeyDocumentError extends Error {}

function kidOf(prefix, raw) {
  return prefix + new Sha256().update(raw).hexDigest().slice(0, 16);
}

/** `key-` and the first 16 lowercase hex of SHA-256 of the raw public key. */
export const keyKid = (raw) => kidOf('key-', raw);
/** `root-` and the same. */
export const rootKid = (raw) => kidOf('root-', raw);

function strings(value, members, kind) {
  if (!isObject(value)) throw new KeyDocumentError(`a ${kind} is a JSON object`);
  const missing = members.filter((name) => !Object.prototype.hasOwnProperty.call(value, name));
  const unknown = Object.keys(value).filter((name) => !members.includes(name)).sort();
  if (missing.length || unknown.length) {
    const parts = [...(missing.length ? [`missing ${missing.join(', ')}`] : []), ...(unknown.length ? [`unknown ${unknown.join(', ')}`] : [])];
    throw new KeyDocumentError(`a ${kind}: ${parts.join('; ')}`);
  }
  for (const name of members) if (typeof value[name] !== 'string') throw new KeyDocumentError(`a ${kind}: ${name} is not a string`);
}

function time(text, what) {
  const moment = TIME_RE.test(text) ? new Date(text) : null;
  if (moment === null || Number.isNaN(moment.getTime()) || moment.toISOString() !== text) {
    throw new KeyDocumentError(`${what} is not a time in created_at form (YYYY-MM-DDTHH:MM:SS.mmmZ)`);
  }
}

function bytes(text, size, what) {
  try {
    return b64urlDecodeStrict(text, size);
  } catch {
    throw new KeyDocumentError(`${what} is not ${size} bytes of base64url`);
  }
}

function unsigned(value) {
  const out = { ...value };
  delete out.signature;
  return out;
}

/** A key certificate read strictly (every member, no other); its signature is checked by judge(). */
export function readCertificate(value) {
  strings(value, CERTIFICATE_MEMBERS, 'key certificate');
  if (value.type !== CERTIFICATE_TYPE || value.alg !== 'Ed25519') {
    throw new KeyDocumentError(`a key certificate has type ${CERTIFICATE_TYPE} and alg Ed25519`);
  }
  const publicKey = bytes(value.public_key_base64url, 32, 'the certified key');
  if (value.kid !== keyKid(publicKey)) throw new KeyDocumentError(`a key certificate's kid ${JSON.stringify(value.kid)} is not its key's`);
  if (!ROOT_KID_RE.test(value.root_kid)) throw new KeyDocumentError("a key certificate's root_kid is not root- and 16 hex");
  time(value.not_before, "a key certificate's not_before");
  time(value.not_after, "a key certificate's not_after");
  if (value.not_after < value.not_before) throw new KeyDocumentError('a key certificate ends before it starts');
  return {
    kid: value.kid,
    publicKey,
    notBefore: value.not_before,
    notAfter: value.not_after,
    rootKid: value.root_kid,
    signature: bytes(value.signature, 64, "a key certificate's signature"),
    unsigned: unsigned(value),
  };
}

/** A key revocation read strictly; its signature is checked against the roots by the caller. */
export function readRevocation(value) {
  strings(value, REVOCATION_MEMBERS, 'key revocation');
  if (value.type !== REVOCATION_TYPE) throw new KeyDocumentError(`a key revocation has type ${REVOCATION_TYPE}`);
  if (!KEY_KID_RE.test(value.kid) || !ROOT_KID_RE.test(value.root_kid)) {
    throw new KeyDocumentError('a key revocation names a kid (key-…) and a root_kid (root-…)');
  }
  time(value.revoked_after, "a key revocation's revoked_after");
  if ([...value.reason].length > MAX_REASON) throw new KeyDocumentError(`a key revocation's reason is longer than ${MAX_REASON} characters`);
  return {
    kid: value.kid,
    revokedAfter: value.revoked_after,
    reason: value.reason,
    rootKid: value.root_kid,
    signature: bytes(value.signature, 64, "a key revocation's signature"),
    unsigned: unsigned(value),
  };
}

/** Whether `document` (a read certificate or revocation) is signed by the raw Ed25519 key `root`. */
export async function signedBy(document, root) {
  const subtle = globalThis.crypto.subtle;
  const key = await subtle.importKey('raw', root, { name: 'Ed25519' }, false, ['verify']);
  return subtle.verify({ name: 'Ed25519' }, key, document.signature, new TextEncoder().encode(jcs(document.unsigned)));
}

/**
 * The revocations among `documents` that a pinned root signed, by kid (the earliest
 * revoked_after when several name one kid); malformed or unsigned ones are left out (a
 * revocation only ever takes trust away). `roots`: Map of root kid to raw public key.
 */
export async function checkedRevocations(documents, roots) {
  const found = new Map();
  for (const document of Array.isArray(documents) ? documents : []) {
    let revocation;
    try {
      revocation = readRevocation(document);
    } catch (err) {
      if (err instanceof KeyDocumentError) continue;
      throw err;
    }
    const root = roots.get(revocation.rootKid);
    if (!root || !(await signedBy(revocation, root))) continue;
    const earlier = found.get(revocation.kid);
    if (!earlier || revocation.revokedAfter < earlier.revokedAfter) found.set(revocation.kid, revocation);
  }
  return found;
}

/** The state of a certificate (null: none at hand) for a receipt created at `createdAt`. */
export async function judge(certificate, createdAt, roots, revocations) {
  if (certificate === null) return 'no_key_certificate';
  const root = roots.get(certificate.rootKid);
  if (!root) return 'unknown_root';
  if (!(await signedBy(certificate, root))) return 'bad_certificate';
  if (typeof createdAt !== 'string' || !(certificate.notBefore <= createdAt && createdAt <= certificate.notAfter)) {
    return 'outside_certificate';
  }
  const revocation = revocations.get(certificate.kid);
  if (revocation && revocation.rootKid === certificate.rootKid && createdAt >= revocation.revokedAfter) return 'revoked';
  return 'ok';
}

function describe(state, kid, certificate, revocation) {
  const name = JSON.stringify(kid);
  const root = certificate ? certificate.rootKid : '?';
  const window = certificate ? `${certificate.notBefore} to ${certificate.notAfter}` : '?';
  switch (state) {
    case 'ok':
      return `The key ${name} is certified by the pinned root ${root} for receipts created ${window}, which covers this one, and no revocation covers it.`;
    case 'no_key_certificate':
      return `No certificate for the key ${name} is at hand: your trust root pins receipt roots, not keys, and nothing given here holds that key's certificate.`;
    case 'unknown_root':
      return `The key ${name} is certified by ${root}, a root your trust root does not pin: the receipt cannot count.`;
    case 'bad_certificate':
      return `The certificate of the key ${name} does not verify with the root it names (${root}): it was forged or changed.`;
    case 'outside_certificate':
      return `The receipt was created outside the certificate of the key ${name} (${window}): the key could not sign it then.`;
    default:
      return (
        `The key ${name} is revoked by ${root} from ${revocation ? revocation.revokedAfter : '?'}` +
        `${revocation && revocation.reason ? ` (${revocation.reason})` : ''}, which covers this receipt.`
      );
  }
}

/**
 * Keys (a GET /v1/public-key body: a bundle's `keys`, or what the service answered) judged by
 * the pinned roots of a version 2 trust root (`pins.roots`, a Map, and `pins.revocations`).
 * Returns {keySet, judgeReceipt(receipt) → {state, detail}}. A certificate that is malformed or
 * for another key throws a KeyDocumentError (the keys cannot be read).
 */
export async function certifiedKeys(pins, keySet) {
  const entries = isObject(keySet) && Array.isArray(keySet.keys) ? keySet.keys.filter(isObject) : [];
  const certificates = new Map();
  for (const entry of entries) {
    if (entry.certificate === undefined || entry.certificate === null) continue;
    const certificate = readCertificate(entry.certificate);
    let same = false;
    try {
      const listed = b64urlDecodeStrict(entry.public_key_base64url, 32);
      same = listed.every((byte, i) => byte === certificate.publicKey[i]);
    } catch {
      same = false;
    }
    if (certificate.kid !== entry.kid || !same) throw new KeyDocumentError(`the certificate of ${JSON.stringify(entry.kid)} is for another key`);
    certificates.set(entry.kid, certificate);
  }
  const carried = isObject(keySet) && Array.isArray(keySet.revocations) ? keySet.revocations : [];
  const revocations = await checkedRevocations([...pins.revocations, ...carried], pins.roots);
  return {
    keySet: { keys: entries, active_kid: isObject(keySet) ? keySet.active_kid : null },
    async judgeReceipt(receipt) {
      const kid = isObject(receipt) ? receipt.sig_kid : undefined;
      const certificate = typeof kid === 'string' && certificates.has(kid) ? certificates.get(kid) : null;
      const state = await judge(certificate, isObject(receipt) ? receipt.created_at : undefined, pins.roots, revocations);
      return { state, detail: describe(state, kid, certificate, revocations.get(kid)) };
    },
  };
}
