// The public verification page (docs/verify-page.md). Wiring only: the checks themselves live
// in verify-core.js (shared with the Node.js tests) and the streaming hash in sha256.js.
// No inline handlers, no third-party code. The only requests this page makes are
// GET /v1/receipts/{id} and GET /v1/public-key on its own origin (a saved key set, when given,
// replaces the second), and when the service runs a transparency log (<body data-log="on">)
// GET /v1/log and, unless a bundle carries it, GET /v1/receipts/{id}/log-proof. A bundle's keys are pinned: they must be the service's published keys
// (or the saved key set's), and a bundle checked only against its own keys is never "valid".
// The checkpoint's witness cosignatures are checked against the witness policy pasted on the
// page, else the one GET /v1/log publishes, as `service.py verify --log-policy` checks them.

import * as core from './verify-core.js';
import * as tlog from './verify-log.js';
import { Sha256 } from './sha256.js';

const CHUNK_BYTES = 4 * 1024 * 1024;

const form = document.getElementById('verify-form');
const input = document.getElementById('receipt-input');
const bundleFile = document.getElementById('bundle-file');
const dropZone = document.getElementById('bundle-drop');
const keysFile = document.getElementById('keys-file');
const keysDrop = document.getElementById('keys-drop');
const keysStatus = document.getElementById('keys-status');
const inputFile = document.getElementById('input-file');
const outputFile = document.getElementById('output-file');
const saltInput = document.getElementById('input-salt');
const button = document.getElementById('verify-button');
const progressBox = document.getElementById('progress-box');
const progressLabel = document.getElementById('progress-label');
const progress = document.getElementById('hash-progress');
const verdict = document.getElementById('verdict');
const supportBox = document.getElementById('support');
const policyField = document.getElementById('policy-field');
const policyInput = document.getElementById('policy-input');

// The witness policy field matters only when the service runs a log.
if (document.body.dataset.log === 'on') policyField.hidden = false;

class PageError extends Error {}

const NOT_VERIFIED =
  "The signatures match the keys the bundle carries, but those keys were not checked against the service's " +
  'published keys: NOT verified. Open this page on the service, or give it a saved key set.';

const SUPPORT_MESSAGES = {
  'insecure-context':
    'This page is not open in a secure context, so the browser hides WebCrypto and nothing can be verified here. ' +
    'Open it over https, or over http on localhost / 127.0.0.1.',
  'no-subtle':
    'This browser offers no WebCrypto (crypto.subtle), so nothing can be verified here. Use a current browser over ' +
    'https, or http on localhost / 127.0.0.1.',
  'no-ed25519':
    'This browser\'s WebCrypto cannot check Ed25519 signatures (it needs Chromium 137+, Firefox 129+ or Safari 17+). ' +
    'Update the browser, or verify with the command line or docs/receipt-format.md.',
};

const supportReady = core.cryptoSupport().then((support) => {
  if (!support.ok) {
    supportBox.textContent = SUPPORT_MESSAGES[support.reason];
    supportBox.hidden = false;
  }
  return support;
});

// ------------------------------------------------------------------ rendering

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

function showVerdict(kind, title, body) {
  verdict.dataset.verdict = kind;
  verdict.replaceChildren(el('p', { class: 'verdict-title' }, title), ...body);
}

function showError(message) {
  showVerdict('error', 'Could not verify', [el('p', {}, message)]);
}

function checkList(checks) {
  const list = el('ul', { class: 'checks' });
  for (const c of checks) {
    const state = c.info || c.unchecked ? 'info' : c.ok ? 'pass' : 'fail';
    const mark = c.info ? 'Note' : c.unchecked ? 'Not checked' : c.ok ? 'Pass' : 'Fail';
    const item = el('li', { class: state, 'data-check': c.id, 'data-ok': String(Boolean(c.ok)) });
    item.append(el('span', { class: 'mark' }, mark + ':'), el('strong', {}, c.title + '. '), c.detail);
    list.append(item);
  }
  return list;
}

function facts(receipt) {
  const dl = el('dl', { class: 'facts' });
  for (const key of ['receipt_id', 'project_id', 'created_at', 'input_hash', 'output_hash', 'receipt_hash']) {
    if (receipt && typeof receipt[key] === 'string') dl.append(el('dt', {}, key), el('dd', {}, receipt[key]));
  }
  return dl;
}

// ------------------------------------------------------------------ data sources

async function fetchJson(path, what) {
  let response;
  try {
    response = await fetch(path, { headers: { Accept: 'application/json' }, credentials: 'omit', cache: 'no-store' });
  } catch (err) {
    throw new PageError(`Could not reach the service to fetch ${what} (network failure: ${err.message || err}).`);
  }
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    throw new PageError(`The service's answer for ${what} (HTTP ${response.status}) is not valid JSON.`);
  }
  if (!response.ok) {
    const message = core.isObject(body) && core.isObject(body.error) ? String(body.error.message) : '';
    if (response.status === 404) throw new PageError(`Not found: ${what} does not exist on this service${message ? ` (${message})` : ''}.`);
    throw new PageError(`The service refused to give ${what}: HTTP ${response.status}${message ? ` (${message})` : ''}.`);
  }
  return body;
}

async function fetchKeys() {
  const keys = await fetchJson('/v1/public-key', "the service's public keys");
  if (!core.isObject(keys) || !Array.isArray(keys.keys)) throw new PageError("The service's key list is malformed.");
  return keys;
}

/** The saved key set chosen or dropped on the page ({keys, name}), or null when none was given. */
async function savedKeys() {
  const file = keysFile.files && keysFile.files[0];
  if (!file) return null;
  let keys;
  try {
    keys = JSON.parse(await file.text());
  } catch {
    throw new PageError(`"${file.name}" is not a saved key set: it is not valid JSON.`);
  }
  if (!core.isKeySet(keys)) {
    throw new PageError(
      `"${file.name}" is not a saved key set: expected the JSON of GET /v1/public-key ({"keys": […], "active_kid": …}).`,
    );
  }
  return { keys, name: file.name };
}

async function fetchReceipt(id) {
  const body = await fetchJson('/v1/receipts/' + encodeURIComponent(id), `the receipt ${id}`);
  if (!core.isObject(body) || !core.isObject(body.receipt)) throw new PageError('The service answered without a receipt.');
  // A genuine receipt of another id would pass every check: the answer must be the one asked for.
  if (body.receipt.receipt_id !== id) {
    throw new PageError(`The service answered with the receipt ${String(body.receipt.receipt_id)} when asked for ${id}; it is not checked.`);
  }
  return body.receipt;
}

function saltBytes() {
  const text = saltInput.value.trim().toLowerCase();
  if (text === '') return new Uint8Array(0);
  if (!/^([0-9a-f]{2})+$/.test(text)) throw new PageError('The salt must be hexadecimal (pairs of 0-9 a-f), as `service.py hash --salt` printed it.');
  return Uint8Array.from(text.match(/../g), (pair) => parseInt(pair, 16));
}

async function hashFile(file, label, salt) {
  const hash = new Sha256();
  hash.update(salt || new Uint8Array(0));
  progressBox.hidden = false;
  progressLabel.textContent = `Hashing ${label} "${file.name}" (${file.size.toLocaleString()} bytes), locally…`;
  progress.max = Math.max(file.size, 1);
  progress.value = 0;
  for (let offset = 0; offset < file.size; offset += CHUNK_BYTES) {
    const chunk = await file.slice(offset, offset + CHUNK_BYTES).arrayBuffer();
    hash.update(new Uint8Array(chunk));
    progress.value = Math.min(offset + CHUNK_BYTES, file.size);
  }
  progress.value = progress.max;
  return 'sha256:' + hash.hexDigest();
}

// ------------------------------------------------------------------ the check

const LOG_MEANING =
  'The log key signed a tree that holds this receipt at that place: the service cannot remove it, or show ' +
  'someone a history without it, without signing two inconsistent checkpoints. It does not prove when the ' +
  'receipt was made, nor that everyone is shown the same log.';

const QUORUM_MEANING =
  'What it proves: each counted cosignature is a witness saying that, at its time, this checkpoint was consistent ' +
  'with every checkpoint of this log it had seen before; with the quorum met, independent witnesses saw this ' +
  'checkpoint consistent with every one they saw before, so a log showing others a different history would have ' +
  'had to fool them too. What it does not prove: that the witnesses are in fact independent of the service or of ' +
  'each other (that rests on the policy, and the published one comes from this service: paste one you got ' +
  "elsewhere), when the receipt was made (a cosignature time is the witness's clock, and only says the checkpoint " +
  'existed then), or anything about the data behind the hashes.';

const COSIGNATURE_STATUS = {
  valid: 'verifies, counted',
  future: `verifies, but is dated more than ${tlog.COSIGNATURE_SKEW_S} s after this browser's clock: not counted`,
  superseded: 'verifies, but a later cosignature by the same key is the one counted',
  invalid: 'does NOT verify (forged, damaged or made for another checkpoint): not counted',
};

/** POSIX seconds (a BigInt) as "YYYY-MM-DD HH:MM:SS UTC", or the number when no date has it. */
function utc(seconds) {
  const ms = Number(seconds) * 1000;
  if (!(Math.abs(ms) <= 8.64e15)) return `time ${seconds}`;
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d{3}Z$/, ' UTC');
}

/** The pasted witness policy, null when the field is empty; a PageError when it is malformed. */
async function pastedPolicy() {
  if (document.body.dataset.log !== 'on' || policyInput.value.trim() === '') return null;
  try {
    return await tlog.parsePolicy(policyInput.value);
  } catch (err) {
    if (err instanceof tlog.PolicyError) throw new PageError(`The pasted witness policy is not a C2SP tlog-policy: ${err.message}.`);
    throw err;
  }
}

/** The witness-quorum line: a check of the checkpoint's cosignatures, or a note when no policy applies. */
async function quorumCheck(checkpointNote, published, pasted) {
  const title = 'Witness quorum';
  let policy = pasted;
  const source = pasted
    ? 'Policy: the one you pasted on this page (the policy this service publishes was not used).'
    : 'Policy: the one this service publishes (GET /v1/log); paste another above to check against your own.';
  if (!policy) {
    if (typeof published !== 'string' || published.trim() === '') {
      return {
        id: 'log_quorum',
        info: true,
        ok: true,
        title,
        detail: 'This service publishes no witness policy and none was pasted: cosignatures were not checked.',
      };
    }
    try {
      policy = await tlog.parsePolicy(published);
    } catch (err) {
      return { id: 'log_quorum', ok: false, title, detail: `The policy this service publishes cannot be read: ${err.message}.` };
    }
  }
  const now = Math.floor(Date.now() / 1000);
  const result = await tlog.checkQuorum(checkpointNote, policy, now);
  const rows = el('ul', { class: 'cosignatures' });
  for (const line of result.lines) {
    if (line.status === 'log') continue;
    if (line.status === 'unknown') {
      rows.append(el('li', { 'data-status': 'unknown' }, `${line.keyName}: a key the policy does not name, ignored.`));
      continue;
    }
    const time = line.time === null ? 'at an unreadable time' : utc(line.time);
    rows.append(
      el(
        'li',
        { 'data-status': line.status, 'data-witness': line.witness },
        el('strong', {}, line.witness),
        ` (${line.keyName}), cosigned ${time}: ${COSIGNATURE_STATUS[line.status]}.`,
      ),
    );
  }
  if (rows.childElementCount === 0) rows.append(el('li', { 'data-status': 'none' }, 'The checkpoint carries no cosignatures.'));
  const counted = [...result.cosigned.keys()];
  const what = `${counted.length} counted cosignature${counted.length === 1 ? '' : 's'}${counted.length ? ` (${counted.join(', ')})` : ''}`;
  const rule = tlog.describeQuorum(policy);
  let verdictText;
  const one = counted.length === 1;
  if (!result.logSigned) verdictText = `Witness quorum NOT met: ${result.reason}.`;
  else if (result.ok) verdictText = `Witness quorum met: ${what} ${one ? 'meets' : 'meet'} the policy's quorum, ${rule}.`;
  else verdictText = `Witness quorum NOT met: ${what} ${one ? 'does' : 'do'} not meet the policy's quorum, ${rule}.`;
  const detail = el(
    'div',
    { class: 'quorum' },
    el('p', { class: 'quorum-verdict' }, verdictText),
    el('p', {}, `${source} Cosignatures dated after ${utc(BigInt(now + tlog.COSIGNATURE_SKEW_S))} (this browser's clock and ${tlog.COSIGNATURE_SKEW_S} s for witnesses' clocks) are not counted.`),
    rows,
    el('p', { class: 'help' }, `As python service.py verify --log-policy says it: ${result.reason}.`),
    el('p', { class: 'help' }, QUORUM_MEANING),
  );
  return { id: 'log_quorum', ok: result.ok, title, detail };
}

/** The note on a bundle's RFC 3161 time-stamps, counted only (their DER is not read here). */
function timestampsNote(bundle) {
  if (!bundle || !Array.isArray(bundle.timestamps)) return null;
  const n = bundle.timestamps.length;
  const detail =
    n === 0
      ? ['The bundle carries no RFC 3161 time-stamp of this checkpoint.']
      : [`${n} RFC 3161 time-stamp${n === 1 ? '' : 's'}: check them with `, el('code', {}, 'python service.py verify --tsa-roots PEM'), '.'];
  return { id: 'log_timestamps', info: true, ok: true, title: 'Time-stamps', detail: el('span', {}, ...detail) };
}

/** The transparency-log lines: the inclusion check (or a note: pending, no log), then, with a
 * proof, the witness quorum, and a bundle's time-stamps. */
async function logChecks(receipt, bundle, pasted) {
  const inclusion = await logCheck(receipt, bundle);
  const out = [inclusion.check];
  if (inclusion.proof !== null) {
    let checkpointNote = null;
    try {
      checkpointNote = tlog.parseProof(inclusion.proof).note;
    } catch {
      // The inclusion line already says why the proof cannot be read.
    }
    if (checkpointNote !== null) out.push(await quorumCheck(checkpointNote, inclusion.info.policy, pasted));
  }
  const stamps = timestampsNote(bundle);
  if (stamps) out.push(stamps);
  return out;
}

/** The inclusion line, {check, proof, info}: a check, or an information note (pending, no log). */
async function logCheck(receipt, bundle) {
  const title = 'Transparency log';
  const none = (check) => ({ check, proof: null, info: null });
  let info;
  try {
    const response = await fetch('/v1/log', { headers: { Accept: 'application/json' } });
    if (response.status === 503) {
      return none({ id: 'log', info: true, ok: true, title, detail: 'This service runs without a transparency log.' });
    }
    if (!response.ok) throw new Error(`GET /v1/log answered HTTP ${response.status}`);
    info = await response.json();
  } catch (err) {
    return none({ id: 'log', info: true, ok: true, title, detail: `The log could not be read: ${err.message}` });
  }
  let proof = null;
  if (bundle) {
    proof = core.isObject(bundle.log) && typeof bundle.log.proof === 'string' ? bundle.log.proof : null;
  } else if (core.isObject(receipt) && core.isReceiptId(String(receipt.receipt_id))) {
    const response = await fetch(`/v1/receipts/${receipt.receipt_id}/log-proof`);
    if (response.ok) proof = await response.text();
    else if (response.status !== 409) {
      return none({ id: 'log', info: true, ok: true, title, detail: `GET log-proof answered HTTP ${response.status}.` });
    }
  }
  if (proof === null) {
    return none({
      id: 'log',
      info: true,
      ok: true,
      title,
      detail: 'Pending: no published checkpoint covers this receipt yet (the log adds it within seconds).',
    });
  }
  try {
    const found = await tlog.checkInclusion(receipt, proof, info.log_vkey);
    const detail = `In the log at index ${found.index}, checkpoint of size ${found.size} signed by ${found.origin}. ${LOG_MEANING}`;
    return { check: { id: 'log', ok: true, title, detail }, proof, info };
  } catch (err) {
    return { check: { id: 'log', ok: false, title, detail: `Not shown to be in the log: ${err.message}.` }, proof, info };
  }
}

async function verify() {
  const support = await supportReady;
  if (!support.ok) throw new PageError(SUPPORT_MESSAGES[support.reason]);
  const parsed = core.parseUserInput(input.value);
  if (parsed.kind === 'invalid') throw new PageError(parsed.message);
  saltBytes(); // a malformed salt is reported before anything is fetched
  const pasted = await pastedPolicy(); // and so is a malformed witness policy

  const saved = await savedKeys();
  const keysFrom = saved ? `the saved key set "${saved.name}" (no key request was made)` : null;
  let receipt;
  let keys;
  let keySource;
  let bundle = null;
  let pinned = true;
  const checks = [];
  if (parsed.kind === 'id') {
    [receipt, keys] = await Promise.all([fetchReceipt(parsed.id), saved ? saved.keys : fetchKeys()]);
    keySource = saved
      ? `The receipt was fetched from this service (GET /v1/receipts/{id}) and checked against ${keysFrom}.`
      : 'Receipt and public keys were fetched from this service (GET /v1/receipts/{id}, GET /v1/public-key).';
    const url = new URL(window.location.href);
    url.searchParams.set('receipt_id', parsed.id);
    window.history.replaceState(null, '', url);
  } else if (parsed.kind === 'receipt') {
    receipt = parsed.receipt;
    keys = saved ? saved.keys : await fetchKeys();
    keySource = saved
      ? `The pasted receipt was checked against ${keysFrom}.`
      : 'The pasted receipt was checked against the public keys of this service (GET /v1/public-key).';
  } else {
    bundle = parsed.bundle;
    receipt = bundle.receipt;
    const made = `The bundle was made ${String(bundle.created_at)} by ${String(bundle.service)}.`;
    // Pin the bundle's keys: a saved key set, else the keys this service publishes. The keys a
    // bundle carries prove nothing by themselves (anyone can make a key and sign with it).
    let why = '';
    if (saved) {
      keys = saved.keys;
    } else {
      try {
        keys = await fetchKeys();
      } catch (err) {
        if (!(err instanceof PageError)) throw err;
        why = err.message;
        keys = null;
      }
    }
    if (keys) {
      checks.push(core.bundleKeysCheck(bundle.keys, keys, saved ? saved.name : null));
      keySource = saved
        ? `The bundle's receipts and chain were checked in this browser against ${keysFrom}. ${made}`
        : 'The bundle\'s receipts and chain were checked in this browser against the keys this service publishes ' +
          `(GET /v1/public-key, the only request). ${made}`;
    } else {
      pinned = false;
      keys = bundle.keys;
      checks.push({
        id: 'bundle_keys',
        ok: false,
        unchecked: true,
        title: 'Bundle keys',
        detail:
          `${why} No saved key set was given either, so the checks below use the keys the bundle carries, ` +
          "and nothing shows they are the service's.",
      });
      keySource = `${made} Its keys were not pinned: ${why}`;
    }
  }

  const result = await core.verifyReceipt(receipt, keys);
  if (!pinned) {
    // The check lines must not call a key the bundle carries "the service's".
    for (const c of result.checks) {
      if (c.id === 'key' && c.ok) c.detail = `Signed with key "${receipt.sig_kid}", a key the bundle carries (NOT pinned).`;
      if (c.id === 'signature' && c.ok) {
        c.detail =
          `The Ed25519 signature over receipt_hash matches the key "${receipt.sig_kid}" the bundle carries; ` +
          'that shows only that whoever made the bundle holds that key.';
      }
    }
  }
  checks.push(...result.checks);
  const notes = [];
  if (document.body.dataset.log === 'on') {
    for (const c of await logChecks(receipt, bundle, pasted)) (c.info ? notes : checks).push(c);
  }

  if (bundle) {
    const chain = await core.verifyChain(receipt, bundle.chain === undefined ? [] : bundle.chain, keys);
    if (!pinned) {
      for (const c of chain.checks) if (c.ok && c.id.startsWith('chain_receipt_')) c.detail += ' That key is one the bundle carries (NOT pinned).';
    }
    checks.push(...chain.checks);
    const count = Array.isArray(bundle.chain) ? bundle.chain.length : 0;
    const oldest = chain.oldest;
    let text;
    if (count === 0 && core.isObject(receipt) && receipt.prev_receipt_hash === null) {
      text = 'The receipt is the first of its chain (no prev_receipt_hash).';
    } else if (core.isObject(oldest) && oldest.prev_receipt_hash === null) {
      text = `The bundle holds ${count} earlier receipt(s), back to the start of the chain.`;
    } else {
      text =
        `The bundle holds ${count} earlier receipt(s); the oldest one links to a receipt that is not included` +
        (bundle.chain_complete === false ? ' (the bundle says its chain is incomplete).' : '.');
      if (bundle.chain_complete === true) {
        checks.push({
          id: 'chain_complete',
          ok: false,
          title: 'Chain completeness claim',
          detail: 'The bundle says its chain is complete, but its oldest receipt links to an earlier one that is missing.',
        });
      }
    }
    notes.push({ id: 'chain_extent', info: true, ok: true, title: 'Chain', detail: text + ' Later receipts and branches are not visible.' });
  } else if (core.isObject(receipt) && typeof receipt.prev_receipt_hash === 'string') {
    notes.push({
      id: 'chain_extent',
      info: true,
      ok: true,
      title: 'Chain',
      detail: 'The receipt links to an earlier receipt; this page checks chain links only in a bundle.',
    });
  }

  const salt = saltBytes();
  for (const [field, picker, label] of [
    ['input_hash', inputFile, 'input file'],
    ['output_hash', outputFile, 'output file'],
  ]) {
    const file = picker.files && picker.files[0];
    if (!file) continue;
    const computed = await hashFile(file, label, field === 'input_hash' ? salt : null);
    const fileCheck = core.fileHashCheck(field, file.name, computed, core.isObject(receipt) ? receipt[field] : undefined);
    if (field === 'input_hash' && salt.length > 0) fileCheck.detail += ' The file was hashed after the salt bytes (a blinded commitment).';
    checks.push(fileCheck);
  }
  if (!(inputFile.files && inputFile.files[0])) {
    notes.push({
      id: 'no_file',
      info: true,
      ok: true,
      title: 'Your data',
      detail: 'No input file was given, so nothing links this receipt to your data; choose the file to compare its hash.',
    });
  }

  const failed = checks.filter((c) => !c.ok && !c.unchecked);
  const keyNote = result.keyStatus === 'retired' ? ' It was signed by a retired key, which is still listed and valid for the receipts it signed.' : '';
  let kind;
  let title;
  const explanation = [];
  if (failed.length > 0) {
    kind = 'invalid';
    title = `Invalid: ${failed.length} check${failed.length === 1 ? '' : 's'} failed (${failed.map((c) => c.title).join(', ')}).`;
  } else if (!pinned) {
    // Consistent with itself is not verified: the verdict is one of valid, invalid and error, so "error".
    kind = 'error';
    title = 'Not verified: the bundle\'s keys could not be checked against the service\'s published keys.';
    explanation.push(el('p', {}, NOT_VERIFIED));
  } else {
    kind = 'valid';
    title = 'Valid: the receipt is genuine and unchanged.' + keyNote;
  }
  showVerdict(kind, title, [
    ...explanation,
    facts(receipt),
    checkList([...checks, ...notes]),
    el('p', { class: 'help' }, keySource),
    el(
      'p',
      { class: 'help' },
      'This shows who issued these hashes and that they were not changed. It does not prove anything about the raw data ' +
        'beyond a matching file hash, nor that the chain is complete, and it does not replace POST /v1/verify.',
    ),
  ]);
}

// Once a verdict is shown it is scrolled into view (the form is taller than a laptop screen, so
// the result would otherwise appear below the fold). Only the page moves: focus stays where it is,
// and screen readers hear the verdict through the region's aria-live. Someone who typed into a
// field while the check ran keeps their place: the page does not move under them.
const reducedMotion = window.matchMedia('(prefers-reduced-motion: reduce)');
let checking = false;
let typedWhileChecking = false;
form.addEventListener('input', () => {
  if (checking) typedWhileChecking = true;
});

function revealVerdict() {
  if (typedWhileChecking) return;
  verdict.scrollIntoView({ block: 'nearest', behavior: reducedMotion.matches ? 'auto' : 'smooth' });
}

async function run() {
  // Disabling the button drops its focus to <body>; it is given back after the check (below).
  const buttonHadFocus = document.activeElement === button;
  button.disabled = true;
  checking = true;
  typedWhileChecking = false;
  verdict.setAttribute('aria-busy', 'true');
  showVerdict('', 'Checking…', []);
  try {
    await verify();
  } catch (err) {
    showError(err instanceof PageError ? err.message : `Unexpected error: ${err && err.message ? err.message : err}`);
  } finally {
    progressBox.hidden = true;
    button.disabled = false;
    checking = false;
    verdict.removeAttribute('aria-busy');
    if (buttonHadFocus && document.activeElement === document.body) button.focus({ preventScroll: true });
    revealVerdict();
  }
}

// ------------------------------------------------------------------ events

async function loadDocumentFile(file) {
  if (!file) return;
  try {
    input.value = await file.text();
    showVerdict('', `Loaded "${file.name}". Press Verify to check it.`, []);
  } catch (err) {
    showError(`Could not read "${file.name}": ${err.message || err}.`);
  }
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  run();
});

form.addEventListener('reset', () => {
  showVerdict('', 'No receipt checked yet.', []);
  progressBox.hidden = true;
  showKeysFile(null); // the reset event fires before the inputs are cleared
});

function showKeysFile(file = keysFile.files && keysFile.files[0]) {
  keysStatus.textContent = file
    ? `Keys are pinned to the saved key set "${file.name}": no key request is made.`
    : 'No saved key set: a bundle\'s keys are checked against the keys this service publishes.';
}

function dropTarget(zone, onDrop) {
  for (const name of ['dragenter', 'dragover']) {
    zone.addEventListener(name, (event) => {
      event.preventDefault();
      zone.classList.add('dragging');
    });
  }
  zone.addEventListener('dragleave', () => zone.classList.remove('dragging'));
  zone.addEventListener('drop', (event) => {
    event.preventDefault();
    zone.classList.remove('dragging');
    const files = event.dataTransfer && event.dataTransfer.files;
    if (files && files.length > 0) onDrop(files);
  });
}

bundleFile.addEventListener('change', () => loadDocumentFile(bundleFile.files && bundleFile.files[0]));
dropTarget(dropZone, (files) => loadDocumentFile(files[0]));
keysFile.addEventListener('change', () => showKeysFile());
dropTarget(keysDrop, (files) => {
  // The dropped file becomes the input's file, so choosing and dropping are one state.
  keysFile.files = files;
  showKeysFile();
});
// A file dropped anywhere else must not make the browser navigate away (or open it).
window.addEventListener('dragover', (event) => event.preventDefault());
window.addEventListener('drop', (event) => event.preventDefault());

const fromUrl = new URLSearchParams(window.location.search).get('receipt_id');
if (fromUrl) {
  input.value = fromUrl;
  run();
}
