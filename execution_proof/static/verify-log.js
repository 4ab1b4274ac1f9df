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

export function concat(...parts) {
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

/**
 * A log proof that does not hold, as evidence: `reason` is 'bad_log_proof' (the proof, its
 * checkpoint's form, the path or the entry) or 'bad_checkpoint_signature' (the checkpoint is
 * not signed by the log key), the reasons of docs/verdicts.md.
 */
export class LogProofError extends Error {
  constructor(reason, message) {
    super(message);
    this.reason = reason;
  }
}

const badProof = (message) => new LogProofError('bad_log_proof', message);
const badSignature = (message) => new LogProofError('bad_checkpoint_signature', message);

export async function openCheckpoint(note, vkey) {
  const split = note.lastIndexOf('\n\n');
  if (split < 0 || !note.endsWith('\n')) throw badProof('the checkpoint is not a signed note');
  const text = note.slice(0, split + 1);
  const lines = text.split('\n');
  if (lines.length < 4) throw badProof('the checkpoint has fewer than three lines');
  const [origin, sizeText, rootText] = lines;
  if (!/^(0|[1-9][0-9]*)$/.test(sizeText)) throw badProof('the checkpoint size is malformed');
  let root;
  try {
    root = b64decode(rootText);
  } catch {
    throw badProof('the checkpoint root is not base64');
  }
  if (root.length !== 32) throw badProof('the checkpoint root is not 32 bytes');
  const expectedId = (await sha256(concat(ENC.encode(vkey.name + '\n'), new Uint8Array([1]), vkey.key))).slice(0, 4);
  const key = await subtle().importKey('raw', vkey.key, { name: 'Ed25519' }, false, ['verify']);
  let signed = false;
  for (const line of note.slice(split + 2).split('\n').filter((l) => l)) {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m || m[1] !== vkey.name) continue;
    let sig;
    try {
      sig = b64decode(m[2]);
    } catch {
      throw badProof('a signature line of the checkpoint is not base64');
    }
    if (!equal(sig.slice(0, 4), expectedId)) continue;
    if (!(await subtle().verify({ name: 'Ed25519' }, key, sig.slice(4), ENC.encode(text)))) {
      throw badSignature('the log signature on the checkpoint does not verify');
    }
    signed = true;
  }
  if (!signed) throw badSignature('the log key did not sign the checkpoint');
  if (origin !== vkey.name) throw badSignature("the checkpoint's origin is not the log key's name");
  return { origin, size: Number(sizeText), root };
}

/**
 * {ok, index, size, origin}, or throws: a LogProofError (evidence, with its reason) when the
 * proof does not hold, any other error when the log key itself cannot be read.
 */
export async function checkInclusion(receipt, proofText, vkeyText) {
  const vkey = parseVerifierKey(vkeyText);
  let proof;
  try {
    proof = parseProof(proofText);
  } catch (err) {
    throw badProof(err.message);
  }
  const checkpoint = await openCheckpoint(proof.note, vkey);
  const leaf = await leafHash(entryBytes(receipt));
  let root;
  try {
    root = await rootFromInclusion(leaf, proof.index, checkpoint.size, proof.path);
  } catch (err) {
    throw badProof(err.message);
  }
  if (!equal(root, checkpoint.root)) throw badProof("the inclusion proof does not lead to the checkpoint's root");
  return { ok: true, index: proof.index, size: checkpoint.size, origin: checkpoint.origin };
}

// ------------------------------------------------------------------ witnesses
//
// The witness cosignatures of a checkpoint against a C2SP tlog-policy, mirroring
// transparency/note.py (parse_note, verify_note, parse_vkey), transparency/cosignature.py
// (cosignature/v1: key id = SHA-256(name || 0x0A || 0x04 || key)[:4], signature = 8-byte
// big-endian time || Ed25519 over "cosignature/v1\ntime <t>\n" + the note text) and
// transparency/policy.py (parse_policy, check_quorum). Error messages and the quorum's reason are
// the Python ones, word for word (tests/test_verify_page_witnesses.py holds them together).

const LOG_KEY = 0x01;
const COSIGNATURE_V1 = 0x04;
const MAX_TIMESTAMP = (1n << 63n) - 1n;
const MAX_SIGNATURES = 64;
const MAX_NOTE_BYTES = 1 << 20;
const MAX_POLICY = { logs: 256, witnesses: 256, groups: 256 };
// Cosignatures dated up to this many seconds after now count (LOG_COSIGNATURE_SKEW_S's default).
export const COSIGNATURE_SKEW_S = 300;
// What Python's str.split() and the regular expression \s take for whitespace (not JS's \s).
const PY_SPACE = '\t\n\u000b\u000c\r\u001c\u001d\u001e\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000';
const NAME_RE = new RegExp(`^[^${PY_SPACE}+]+$`, 'u');
// C2SP tlog-policy: words are separated by spaces and tabs only.
const WORDS_RE = /[ \t]+/;

export class NoteError extends Error {}
export class PolicyError extends Error {}

function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Python's repr() of a string, as the Python messages quote names. */
function pyRepr(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = '';
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (ch === quote || ch === '\\') out += '\\' + ch;
    else if (ch === '\t') out += '\\t';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp === 0xad) out += '\\x' + cp.toString(16).padStart(2, '0');
    else out += ch;
  }
  return quote + out + quote;
}

/** Python's sorted() order for strings: by code point, not by UTF-16 unit. */
function byCodePoint(a, b) {
  const x = Array.from(a, (c) => c.codePointAt(0));
  const y = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

function strictB64(text, what) {
  // base64.b64decode(text, validate=True): the alphabet, padding only at the end, whole quads.
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) throw new NoteError(`${what} is not base64`);
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

function checkName(name) {
  if (!NAME_RE.test(name)) throw new NoteError("a key name is non-empty, without spaces or '+'");
  return name;
}

async function noteKeyId(name, type, key) {
  return (await sha256(concat(ENC.encode(name + '\n'), new Uint8Array([type]), key))).slice(0, 4);
}

const KEY_TYPES = { 1: "a log's note key", 4: "a witness's cosignature key" };

/** The 32 key bytes of base64(type || key), or what is wrong with them (note._key_bytes). */
function keyBytes(data, type, what) {
  let raw;
  try {
    raw = strictB64(data, 'the key part');
  } catch {
    throw new NoteError(`not a valid ${what}: its key part is not base64 (a character missing, extra or mistyped?)`);
  }
  if (raw.length !== 33) {
    throw new NoteError(`not a valid ${what}: its key part is ${raw.length} bytes, not 33 (a type byte and an Ed25519 key)`);
  }
  if (raw[0] !== type) {
    const other = KEY_TYPES[raw[0]];
    const why = other ? `that is ${other}, not a ${what}` : 'a character mistyped?';
    const hex2 = (n) => n.toString(16).padStart(2, '0');
    throw new NoteError(`not a valid ${what}: its key part starts with type 0x${hex2(raw[0])}, not 0x${hex2(type)} (${why})`);
  }
  return raw.slice(1);
}

/** {name, keyId, key} of `<name>+<key id>+<base64(type || key)>` (note.parse_vkey). */
export async function parseVkey(vkey, type, what) {
  const text = vkey.replace(new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, 'gu'), '');
  const first = text.indexOf('+');
  const second = first < 0 ? -1 : text.indexOf('+', first + 1);
  if (second < 0) throw new NoteError(`a ${what} is <name>+<key id>+<base64 key>`);
  const name = checkName(text.slice(0, first));
  const hexId = text.slice(first + 1, second);
  const key = keyBytes(text.slice(second + 1), type, what);
  const keyId = await noteKeyId(name, type, key);
  if (!/^[0-9a-f]{8}$/.test(hexId)) {
    throw new NoteError(`not a valid ${what}: its key id '${hexId}' is not 8 lower-case hex digits`);
  }
  if (hexId !== hex(keyId)) {
    throw new NoteError(
      `not a valid ${what}: its key id ${hexId} does not match its name and key (the id is a checksum of both: ` +
        'a character mistyped?)',
    );
  }
  return { name, keyId, key };
}

/** {text, signatures: [{name, keyId, signature}]} of a signed note (note.parse_note). */
export function parseNote(note) {
  if (ENC.encode(note).length > MAX_NOTE_BYTES) throw new NoteError('the note is too large');
  if (/[\u0000-\u0009\u000b-\u001f]/.test(note)) throw new NoteError('a note holds no control characters but newlines');
  const split = note.lastIndexOf('\n\n');
  if (split < 0 || !note.endsWith('\n')) throw new NoteError('a note is text, a blank line and signature lines');
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2).split('\n').slice(0, -1);
  if (lines.length === 0) throw new NoteError('the note has no signatures');
  if (lines.length > MAX_SIGNATURES) throw new NoteError('the note has too many signatures');
  const signatures = lines.map((line) => {
    if (!line.startsWith('\u2014 ')) throw new NoteError('a signature line starts with an em dash and a space');
    const rest = line.slice(2);
    const space = rest.indexOf(' ');
    const name = checkName(space < 0 ? rest : rest.slice(0, space));
    const raw = strictB64(space < 0 ? '' : rest.slice(space + 1), 'a signature');
    if (raw.length < 5) throw new NoteError('a signature is a key id and at least one byte');
    return { name, keyId: raw.slice(0, 4), signature: raw.slice(4) };
  });
  return { text, signatures };
}

async function ed25519Verify(key, signature, message) {
  try {
    const imported = await subtle().importKey('raw', key, { name: 'Ed25519' }, false, ['verify']);
    return await subtle().verify({ name: 'Ed25519' }, imported, signature, message);
  } catch {
    return false;
  }
}

function findKey(keys, signature) {
  return keys.find((k) => k.name === signature.name && equal(k.keyId, signature.keyId)) || null;
}

/** The policy of a C2SP tlog-policy text (policy.parse_policy); throws PolicyError naming the line. */
export async function parsePolicy(text) {
  const policy = { logs: [], witnesses: new Map(), groups: new Map(), quorum: 'none', text };
  const logKeys = [];
  const witnessKeys = [];
  const memberOf = new Map();
  const has = (keys, key) => keys.some((k) => equal(k, key));
  const taken = (name, number) => {
    if (name === 'none' || policy.witnesses.has(name) || policy.groups.has(name)) {
      throw new PolicyError(`line ${number}: the name ${pyRepr(name)} is taken`);
    }
  };
  const room = (count, what, number) => {
    if (count >= MAX_POLICY[what]) throw new PolicyError(`line ${number}: more than ${MAX_POLICY[what]} ${what}`);
  };
  let quorumLines = 0;
  const rows = text.split('\n');
  for (let i = 0; i < rows.length; i++) {
    const number = i + 1;
    const line = rows[i].replace(/^[ \t]+|[ \t]+$/g, '');
    if (!line || line.startsWith('#')) continue;
    if (/[\u0000-\u0008\u000a-\u001f\u007f]/.test(line)) throw new PolicyError(`line ${number}: control characters`);
    const words = line.split(WORDS_RE).filter((w) => w);
    const kind = words[0];
    try {
      if (kind === 'log' && (words.length === 2 || words.length === 3)) {
        const key = await parseVkey(words[1], LOG_KEY, 'verifier key');
        if (has(logKeys, key.key)) throw new PolicyError(`line ${number}: a duplicate log key`);
        logKeys.push(key.key);
        room(policy.logs.length, 'logs', number);
        policy.logs.push({ key, url: words[2] || null });
      } else if (kind === 'witness' && (words.length === 3 || words.length === 4)) {
        const name = words[1];
        taken(name, number);
        const key = await parseVkey(words[2], COSIGNATURE_V1, 'witness key');
        if (has(witnessKeys, key.key)) throw new PolicyError(`line ${number}: a duplicate witness key`);
        witnessKeys.push(key.key);
        room(policy.witnesses.size, 'witnesses', number);
        policy.witnesses.set(name, { name, key, url: words[3] || null });
      } else if (kind === 'group' && words.length >= 4) {
        const [, name, rule, ...members] = words;
        taken(name, number);
        for (const member of members) {
          if (member === 'none' || (!policy.witnesses.has(member) && !policy.groups.has(member))) {
            throw new PolicyError(`line ${number}: ${pyRepr(member)} is not a witness or group defined above`);
          }
          if (memberOf.has(member)) {
            const group = memberOf.get(member);
            const where = group === name ? 'in this group twice' : `already a member of group ${pyRepr(group)}`;
            throw new PolicyError(`line ${number}: ${pyRepr(member)} is ${where}`);
          }
          memberOf.set(member, name);
        }
        let threshold;
        if (rule === 'all') threshold = members.length;
        else if (rule === 'any') threshold = 1;
        else if (/^[0-9]+$/.test(rule) && !rule.startsWith('0') && Number(rule) <= members.length) threshold = Number(rule);
        else throw new PolicyError(`line ${number}: the threshold is all, any or 1..${members.length}`);
        room(policy.groups.size, 'groups', number);
        policy.groups.set(name, { threshold, members });
      } else if (kind === 'quorum' && words.length === 2) {
        quorumLines += 1;
        if (quorumLines > 1) throw new PolicyError(`line ${number}: a second quorum line`);
        if (words[1] !== 'none' && !policy.witnesses.has(words[1]) && !policy.groups.has(words[1])) {
          throw new PolicyError(`line ${number}: the quorum names nothing defined above`);
        }
        policy.quorum = words[1];
      } else {
        throw new PolicyError(`line ${number}: not a log, witness, group or quorum line`);
      }
    } catch (err) {
      if (err instanceof NoteError) throw new PolicyError(`line ${number}: ${err.message}`);
      throw err;
    }
  }
  if (quorumLines !== 1) throw new PolicyError('a policy has exactly one quorum line');
  return policy;
}

/** Whether the witnesses named `cosigned` (policy names, a Set) meet the policy's quorum. */
export function satisfied(policy, cosigned) {
  const witnessed = (name) => {
    if (policy.witnesses.has(name)) return cosigned.has(name);
    const { threshold, members } = policy.groups.get(name);
    return members.filter(witnessed).length >= threshold;
  };
  return policy.quorum === 'none' || witnessed(policy.quorum);
}

/** The quorum rule in words, for the page: "none", "witness w1", "group g: 2 of w1, w2, w3". */
export function describeQuorum(policy) {
  if (policy.quorum === 'none') return 'none (no cosignature needed)';
  if (policy.witnesses.has(policy.quorum)) return `witness ${policy.quorum}`;
  const { threshold, members } = policy.groups.get(policy.quorum);
  return `group ${policy.quorum}: ${threshold} of ${members.join(', ')}`;
}

/**
 * Each signature line of a parsed note read as a cosignature by the policy's witnesses
 * (cosignature.cosignatures, line by line): [{keyName, witness (policy name or null), time
 * (BigInt or null), status}], status one of 'valid', 'invalid' (the signature fails, or the
 * time is beyond 2^63 - 1), 'log' (a log key of the policy), 'unknown' (ignored), and
 * `found`, key name -> time of the valid ones (a later line of the same key wins, as in
 * Python). checkQuorum marks a valid line that does not count 'future' or 'superseded'.
 */
export async function checkCosignatures(parsed, policy) {
  const witnessKeys = [...policy.witnesses.values()].map((w) => w.key);
  // By the key itself (name and key id), never by its name alone: two witnesses may use
  // keys of the same name, and one's cosignature must not count for the other.
  const byKey = new Map([...policy.witnesses.values()].map((w) => [w.key, w]));
  const logKeys = policy.logs.map((l) => l.key);
  const lines = [];
  const found = new Map();
  for (const signature of parsed.signatures) {
    const key = findKey(witnessKeys, signature);
    if (key === null) {
      lines.push({ keyName: signature.name, witness: null, time: null, status: findKey(logKeys, signature) ? 'log' : 'unknown' });
      continue;
    }
    const witness = byKey.get(key).name;
    const blob = signature.signature;
    if (blob.length !== 8 + 64) {
      lines.push({ keyName: key.name, witness, time: null, status: 'invalid' });
      continue;
    }
    const time = new DataView(blob.buffer, blob.byteOffset, 8).getBigUint64(0);
    const message = concat(ENC.encode(`cosignature/v1\ntime ${time}\n`), ENC.encode(parsed.text));
    const ok = time <= MAX_TIMESTAMP && (await ed25519Verify(key.key, blob.slice(8), message));
    lines.push({ keyName: key.name, witness, time, status: ok ? 'valid' : 'invalid' });
    if (ok) found.set(witness, time);
  }
  return { lines, found };
}

/**
 * check_quorum of transparency/policy.py: the note's log signature (by a log of the policy),
 * then its cosignatures against the quorum; unknown keys ignored, cosignatures dated more
 * than `skew` seconds after `now` (POSIX seconds) not counted. {ok, reason (Python's words), cosigned (policy name ->
 * BigInt time), future (names), lines (checkCosignatures), logSigned}.
 */
export async function checkQuorum(noteText, policy, now, skew = COSIGNATURE_SKEW_S) {
  const limit = BigInt(now) + BigInt(skew);
  let parsed;
  try {
    parsed = parseNote(noteText);
    const logKeys = policy.logs.map((l) => l.key);
    let signed = false;
    for (const signature of parsed.signatures) {
      const key = findKey(logKeys, signature);
      if (key === null) continue;
      if (!(await ed25519Verify(key.key, signature.signature, ENC.encode(parsed.text)))) {
        throw new NoteError(`the signature of ${signature.name} does not verify`);
      }
      signed = true;
    }
    if (!signed) throw new NoteError('no known key signed the note');
  } catch (err) {
    if (!(err instanceof NoteError)) throw err;
    const reason = `no log of the policy signed the checkpoint: ${err.message}`;
    return { ok: false, reason, cosigned: new Map(), future: [], lines: [], logSigned: false };
  }
  const { lines, found } = await checkCosignatures(parsed, policy);
  const cosigned = new Map();
  const future = [];
  for (const [name, at] of found) {
    if (at <= limit) cosigned.set(name, at);
    else future.push(name);
  }
  future.sort(byCodePoint);
  for (const line of lines) {
    if (line.status !== 'valid') continue;
    // Python keeps one time per key, the last valid line's: an earlier line is not what counts.
    if (found.get(line.witness) !== line.time) line.status = 'superseded';
    else if (line.time > limit) line.status = 'future';
  }
  const names = [...cosigned.keys()].sort(byCodePoint).join(', ');
  if (satisfied(policy, new Set(cosigned.keys()))) {
    return { ok: true, reason: `the quorum is met (${names ? `cosigned by ${names}` : 'the policy requires no witness'})`, cosigned, future, lines, logSigned: true };
  }
  const extra = future.length ? `; dated in the future, not counted: ${future.join(', ')}` : '';
  const reason = `the quorum ${pyRepr(policy.quorum)} is NOT met (valid cosignatures: ${names || 'none'}${extra})`;
  return { ok: false, reason, cosigned, future, lines, logSigned: true };
}
