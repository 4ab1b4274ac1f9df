// The transparency-log check of the verification page (docs/log.md), with WebCrypto only:
// the receipt's entry, its leaf hash, the C2SP tlog-proof's inclusion path (checked as RFC
// 9162 checks one) and the checkpoint's Ed25519 signature under the log's verifier key
// (C2SP signed-note: key id = SHA-256(name || 0x0A || 0x01 || key)[:4]).

const ENC = new TextEncoder();

function subtle() {
  return globalThis.crypto.subtle;
}

async function sha256(bytes) {
  return new Uint8Array(await subtle().digest('SHA-256', bytes));
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

function b64decode(text) {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) throw new Error('not base64');
  const raw = atob(text);
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function equal(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

export function entryBytes(receipt) {
  const lines = [
    'execution-proof-log-entry/v1',
    receipt.receipt_id,
    receipt.receipt_hash,
    receipt.project_id,
    receipt.prev_receipt_hash || '',
    receipt.chain_status || '',
  ].map(String);
  return ENC.encode(lines.join('\n') + '\n');
}

export async function leafHash(entry) {
  return sha256(concat(new Uint8Array([0]), entry));
}

async function nodeHash(left, right) {
  return sha256(concat(new Uint8Array([1]), left, right));
}

export async function rootFromInclusion(leaf, index, size, path) {
  if (!(index >= 0 && index < size)) throw new Error('the index is outside the tree');
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of path) {
    if (sn === 0) throw new Error('the inclusion proof is too long');
    if (fn % 2 === 1 || fn === sn) {
      r = await nodeHash(p, r);
      if (fn % 2 === 0) {
        while (fn !== 0 && fn % 2 === 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  if (sn !== 0) throw new Error('the inclusion proof is too short');
  return r;
}

export function parseVerifierKey(vkey) {
  const first = vkey.indexOf('+');
  const second = vkey.indexOf('+', first + 1);
  if (first < 1 || second < 0) throw new Error('a verifier key is <name>+<key id>+<base64 key>');
  const name = vkey.slice(0, first);
  const id = vkey.slice(first + 1, second);
  const raw = b64decode(vkey.slice(second + 1));
  if (raw.length !== 33 || raw[0] !== 1 || !/^[0-9a-f]{8}$/.test(id)) throw new Error('not an Ed25519 verifier key');
  return { name, id, key: raw.slice(1) };
}

export function parseProof(text) {
  const split = text.indexOf('\n\n');
  if (split < 0) throw new Error('a tlog-proof has a blank line before its checkpoint');
  const head = text.slice(0, split).split('\n');
  const note = text.slice(split + 2);
  if (head[0] !== 'c2sp.org/tlog-proof@v1') throw new Error('not a c2sp.org/tlog-proof@v1');
  let at = 1;
  if (head[at] && head[at].startsWith('extra ')) at++;
  const m = /^index (0|[1-9][0-9]*)$/.exec(head[at] || '');
  if (!m) throw new Error('the proof names no index');
  const path = head.slice(at + 1).map(b64decode);
  if (path.some((h) => h.length !== 32)) throw new Error('a proof hash is not 32 bytes');
  return { index: Number(m[1]), path, note };
}

export async function openCheckpoint(note, vkey) {
  const split = note.lastIndexOf('\n\n');
  if (split < 0 || !note.endsWith('\n')) throw new Error('the checkpoint is not a signed note');
  const text = note.slice(0, split + 1);
  const lines = text.split('\n');
  if (lines.length < 4) throw new Error('the checkpoint has fewer than three lines');
  const [origin, sizeText, rootText] = lines;
  if (!/^(0|[1-9][0-9]*)$/.test(sizeText)) throw new Error('the checkpoint size is malformed');
  const root = b64decode(rootText);
  if (root.length !== 32) throw new Error('the checkpoint root is not 32 bytes');
  const expectedId = (await sha256(concat(ENC.encode(vkey.name + '\n'), new Uint8Array([1]), vkey.key))).slice(0, 4);
  const key = await subtle().importKey('raw', vkey.key, { name: 'Ed25519' }, false, ['verify']);
  let signed = false;
  for (const line of note.slice(split + 2).split('\n').filter((l) => l)) {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m || m[1] !== vkey.name) continue;
    const sig = b64decode(m[2]);
    if (!equal(sig.slice(0, 4), expectedId)) continue;
    if (!(await subtle().verify({ name: 'Ed25519' }, key, sig.slice(4), ENC.encode(text)))) {
      throw new Error('the log signature on the checkpoint does not verify');
    }
    signed = true;
  }
  if (!signed) throw new Error('the log key did not sign the checkpoint');
  if (origin !== vkey.name) throw new Error("the checkpoint's origin is not the log key's name");
  return { origin, size: Number(sizeText), root };
}

/** {ok, index, size, origin} or throws with what failed. */
export async function checkInclusion(receipt, proofText, vkeyText) {
  const vkey = parseVerifierKey(vkeyText);
  const proof = parseProof(proofText);
  const checkpoint = await openCheckpoint(proof.note, vkey);
  const leaf = await leafHash(entryBytes(receipt));
  const root = await rootFromInclusion(leaf, proof.index, checkpoint.size, proof.path);
  if (!equal(root, checkpoint.root)) throw new Error("the inclusion proof does not lead to the checkpoint's root");
  return { ok: true, index: proof.index, size: checkpoint.size, origin: checkpoint.origin };
}
