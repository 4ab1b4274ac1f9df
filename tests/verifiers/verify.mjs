#!/usr/bin/env node
// An independent receipt verifier written only from docs/receipt-format.md.
// Node.js >= 20, no npm packages: node:crypto only, its own JCS for strings-only objects.
//
//   node verify.mjs < {"receipt": {...}, "keys": {GET /v1/public-key body}}
//     prints {"ok", "checks": {format, receipt_hash_recompute, key_known, signature},
//             "recomputed_receipt_hash", "canonical_hex"}; exit code 0 valid, 1 invalid.
//   node verify.mjs --batch < [{"receipt", "keys"}, ...]
//     prints one such result per item, as a JSON array (exit code 0).
//   node verify.mjs --canonicalize < [value, ...]
//     prints [hex of the JCS bytes of each value, or null when it cannot be canonicalized].

import { createHash, createPublicKey, verify as edVerify } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const UNSIGNED = new Set(['receipt_hash', 'signature', 'sig_kid', 'receipt_kind']);
const SHORT = { '"': '\\"', '\\': '\\\\', '\b': '\\b', '\t': '\\t', '\n': '\\n', '\f': '\\f', '\r': '\\r' };

function jcsString(s) {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdfff) {
      const d = s.charCodeAt(i + 1);
      if (c > 0xdbff || !(d >= 0xdc00 && d <= 0xdfff)) throw new Error('lone surrogate');
      out += s[i] + s[i + 1];
      i++;
      continue;
    }
    const ch = s[i];
    if (Object.hasOwn(SHORT, ch)) out += SHORT[ch];
    else if (c < 0x20) out += '\\u' + c.toString(16).padStart(4, '0');
    else out += ch;
  }
  return out + '"';
}

function jcs(v) {
  if (v === null) return 'null';
  if (typeof v === 'string') return jcsString(v);
  if (typeof v === 'object' && !Array.isArray(v)) {
    // Array.prototype.sort() without a comparator compares UTF-16 code units: what JCS wants.
    const keys = Object.keys(v).sort();
    return '{' + keys.map((k) => jcsString(k) + ':' + jcs(v[k])).join(',') + '}';
  }
  throw new Error('receipts hold only strings, nulls and the tags object');
}

function canonicalBytes(value) {
  return Buffer.from(jcs(value), 'utf8');
}

function signedPayload(receipt) {
  return Object.fromEntries(Object.entries(receipt).filter(([k]) => !UNSIGNED.has(k)));
}

function b64urlStrict(text, size) {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text)) throw new Error('not base64url without padding');
  const raw = Buffer.from(text, 'base64url');
  if (raw.length !== size || raw.toString('base64url') !== text) throw new Error('wrong length or non-canonical');
  return raw;
}

function isObject(v) {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function formatOk(receipt) {
  if (!isObject(receipt)) return false;
  if (typeof receipt.receipt_hash !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(receipt.receipt_hash)) return false;
  if (typeof receipt.signature !== 'string' || !/^[A-Za-z0-9_-]{86}$/.test(receipt.signature)) return false;
  if (typeof receipt.sig_kid !== 'string') return false;
  for (const [key, value] of Object.entries(signedPayload(receipt))) {
    if (key === 'tags' && isObject(value)) {
      if (!Object.values(value).every((t) => typeof t === 'string')) return false;
    } else if (value !== null && typeof value !== 'string') {
      return false;
    }
  }
  return true;
}

function findKey(keySet, kid) {
  if (!isObject(keySet) || !Array.isArray(keySet.keys) || typeof kid !== 'string') return null;
  const entry = keySet.keys.find((k) => isObject(k) && k.kid === kid);
  if (!entry || entry.alg !== 'Ed25519') return null;
  try {
    b64urlStrict(entry.public_key_base64url, 32);
    return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: entry.public_key_base64url }, format: 'jwk' });
  } catch {
    return null;
  }
}

export function verifyReceipt(receipt, keySet) {
  const format = formatOk(receipt);
  let canonical = null;
  let recomputed = null;
  if (isObject(receipt)) {
    try {
      canonical = canonicalBytes(signedPayload(receipt));
      recomputed = 'sha256:' + createHash('sha256').update(canonical).digest('hex');
    } catch {
      canonical = null;
    }
  }
  const storedHash = isObject(receipt) ? receipt.receipt_hash : undefined;
  const key = isObject(receipt) ? findKey(keySet, receipt.sig_kid) : null;
  let signature = false;
  // The message is the 71 ASCII bytes of the receipt_hash string; anything non-ASCII is invalid.
  if (key && typeof storedHash === 'string' && /^[\x00-\x7f]*$/.test(storedHash)) {
    try {
      signature = edVerify(null, Buffer.from(storedHash, 'ascii'), key, b64urlStrict(receipt.signature, 64));
    } catch {
      signature = false;
    }
  }
  const checks = {
    format,
    receipt_hash_recompute: recomputed !== null && recomputed === storedHash,
    key_known: key !== null,
    signature,
  };
  return {
    ok: Object.values(checks).every(Boolean),
    checks,
    recomputed_receipt_hash: recomputed,
    canonical_hex: canonical ? canonical.toString('hex') : null,
  };
}

// Accept a bare receipt or a GET /v1/receipts/{id} response body ({"ok": true, "receipt": {...}}).
function unwrap(receipt) {
  return isObject(receipt) && isObject(receipt.receipt) && 'ok' in receipt ? receipt.receipt : receipt;
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

async function main() {
  const input = JSON.parse(await readStdin());
  if (process.argv.includes('--canonicalize')) {
    const out = input.map((value) => {
      try {
        return canonicalBytes(value).toString('hex');
      } catch {
        return null;
      }
    });
    process.stdout.write(JSON.stringify(out) + '\n');
    return;
  }
  if (process.argv.includes('--batch')) {
    const out = input.map((item) => verifyReceipt(unwrap(item.receipt), item.keys));
    process.stdout.write(JSON.stringify(out) + '\n');
    return;
  }
  const result = verifyReceipt(unwrap(input.receipt), input.keys);
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exitCode = result.ok ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  main().catch((err) => {
    process.stderr.write(String(err && err.stack ? err.stack : err) + '\n');
    process.exitCode = 2;
  });
}
