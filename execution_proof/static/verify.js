// The public verification page (docs/verify-page.md). Wiring only: the checks live in
// verify-core.js (a receipt, a chain, a bundle's keys), verify-log.js (the log proof and the
// witness quorum), verify-read.js (what a document and the pinned file are, read strictly) and
// verify-verdict.js (the verdict and its reason, docs/verdicts.md); what is shown is built by
// verify-lines.js, the requests are verify-fetch.js's, and sha256.js hashes local files. No
// inline handlers, no third-party code.
//
// Requests, all to this page's own origin: GET /v1/receipts/{id} for a receipt id; with nothing
// pinned, GET /v1/public-key, and on a service that runs a log (<body data-log="on">) GET
// /v1/log and, for a receipt without its proof, GET /v1/receipts/{id}/log-proof. The "Saved key
// set" file (a GET /v1/public-key body, the keys.json execution-proof trust-root --sigstore
// writes, or a trust root) is the pinned material: it replaces every key and log request, so a
// pasted or dropped document is checked offline, and a trust
// root that names a log makes the receipt's inclusion in that log required (for a receipt id,
// the page asks for its log-proof). A bundle's own keys prove nothing: checked only against
// them, a bundle is never "valid". A version 2 trust root pins receipt roots, not keys: the keys
// a bundle carries (or, for a receipt id, GET /v1/public-key?kid=K) count only through a
// certificate a pinned root signed (verify-keys.js); a pasted plain receipt has no key at hand.
// A receipt's attestation (verify-attest.js: a DSSE envelope, a Sigstore bundle, or a bundle's
// `attestation`) is checked as its receipt is, plus the envelope's signature by the same key;
// a Sigstore bundle's log entry proves the attestation's leaf, which stands for the receipt's
// log inclusion.

import * as attest from './verify-attest.js';
import * as core from './verify-core.js';
import { fetchKeyOf, fetchKeys, fetchLogProof, fetchReceipt } from './verify-fetch.js';
import { certifiedKeys, KeyDocumentError } from './verify-keys.js';
import { checkList, el, facts, PageError, pinnedLogLines, serviceLogLines, sigstoreLogLines } from './verify-lines.js';
import * as tlog from './verify-log.js';
import { parseUserInput, ReadError, readPinned } from './verify-read.js';
import { decide, MISSING_NOTES } from './verify-verdict.js';
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

const serviceLog = document.body.dataset.log === 'on';
// The witness policy field matters when the service runs a log, or a trust root pins one.
policyField.hidden = !serviceLog;

const SUPPORT_MESSAGES = {
  'insecure-context':
    'This page is not open in a secure context, so the browser hides WebCrypto and nothing can be verified here. ' +
    'Open it over https, or over http on localhost / 127.0.0.1.',
  'no-subtle':
    'This browser offers no WebCrypto (crypto.subtle), so nothing can be verified here. Use a current browser over ' +
    'https, or http on localhost / 127.0.0.1.',
  'no-ed25519':
    'This browser\'s WebCrypto cannot check Ed25519 signatures (it needs Chromium 137+, Firefox 129+ or Safari 17+). ' +
    'Update the browser, or verify with execution-proof verify or docs/receipt-format.md.',
};

const supportReady = core.cryptoSupport().then((support) => {
  if (!support.ok) {
    supportBox.textContent = SUPPORT_MESSAGES[support.reason];
    supportBox.hidden = false;
  }
  return support;
});

// ------------------------------------------------------------------ rendering

/** The verdict region: data-verdict valid | invalid | error, and data-reason for INVALID and NOT VERIFIED. */
function showVerdict(kind, title, body, reason = null) {
  verdict.dataset.verdict = kind;
  if (reason) verdict.dataset.reason = reason;
  else delete verdict.dataset.reason;
  verdict.replaceChildren(el('p', { class: 'verdict-title' }, title), ...body);
}

function showError(message) {
  showVerdict('error', 'Could not verify', [el('p', {}, message)]);
}

// ------------------------------------------------------------------ data sources

/** Keys judged by the roots of a version 2 trust root (verify-keys.js), or a PageError when a certificate is malformed. */
async function judgedKeys(pins, keys) {
  try {
    return await certifiedKeys(pins, keys);
  } catch (err) {
    if (err instanceof KeyDocumentError) throw new PageError(`The keys cannot be read: ${err.message}.`);
    throw err;
  }
}

/** The pinned material chosen or dropped on "Saved key set" (verify-read.js readPinned), or null. */
async function savedPins() {
  const file = keysFile.files && keysFile.files[0];
  if (!file) return null;
  try {
    return await readPinned(await file.text(), file.name);
  } catch (err) {
    if (err instanceof ReadError) throw new PageError(err.message);
    throw err;
  }
}

function saltBytes() {
  const text = saltInput.value.trim().toLowerCase();
  if (text === '') return new Uint8Array(0);
  if (!/^([0-9a-f]{2})+$/.test(text)) {
    throw new PageError('The salt must be hexadecimal (pairs of 0-9 a-f), as `execution-proof hash --salt` printed it.');
  }
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

/** The pasted witness policy, null when the field is hidden or empty; a PageError when it is malformed. */
async function pastedPolicy() {
  if (policyField.hidden || policyInput.value.trim() === '') return null;
  try {
    return await tlog.parsePolicy(policyInput.value);
  } catch (err) {
    if (err instanceof tlog.PolicyError) throw new PageError(`The pasted witness policy is not a C2SP tlog-policy: ${err.message}.`);
    throw err;
  }
}

// ------------------------------------------------------------------ the check

function pinnedName(pins) {
  return pins.kind === 'trust_root' ? `the trust root "${pins.name}"` : `the saved key set "${pins.name}"`;
}

/** What a pasted document that is not a bundle is called in the explanations. */
function pastedName(doc) {
  return { envelope: 'The DSSE envelope', sigstore: 'The Sigstore bundle' }[doc.shape] || 'The pasted receipt';
}

/** Under a version 2 trust root: the keys the document carries, each judged by the pinned roots. */
function certifiedChoice(parsed, doc, pins) {
  const roots = `the receipt roots of ${pinnedName(pins)}`;
  if (parsed.kind === 'id') {
    return {
      keySource: `The receipt and its key's certificate were fetched from this service (GET /v1/receipts/{id}, GET /v1/public-key?kid=…) and the certificate checked against ${roots}.`,
      pinned: true,
      certified: true,
      checks: [],
    };
  }
  const bundle = doc.shape === 'bundle' ? doc.bundle : null;
  return {
    keys: bundle ? bundle.keys : { keys: [], active_kid: null },
    keySource: bundle
      ? `The bundle's receipts and chain were checked in this browser with the keys it carries, each counting only through its certificate, checked against ${roots} (no key request was made). The bundle was made ${bundle.created_at} by ${bundle.service}.`
      : `${doc.attestation ? `${pastedName(doc)} carries no key certificate` : 'A pasted receipt carries no key'}, and ${pinnedName(pins)} pins receipt roots, not keys (no key request was made).`,
    pinned: true,
    certified: true,
    checks: [],
  };
}

/** The keys and where they come from: {keys, keySource, pinned, certified, checks (bundle_keys)}. */
async function chooseKeys(parsed, doc, pins) {
  if (pins && pins.roots) return certifiedChoice(parsed, doc, pins);
  const keysFrom = pins ? `${pinnedName(pins)} (no key request was made)` : null;
  if (parsed.kind === 'id') {
    return {
      keySource: pins
        ? `The receipt was fetched from this service (GET /v1/receipts/{id}) and checked against ${keysFrom}.`
        : 'Receipt and public keys were fetched from this service (GET /v1/receipts/{id}, GET /v1/public-key).',
      pinned: true,
      checks: [],
    };
  }
  if (doc.shape !== 'bundle') {
    return {
      keys: pins ? pins.keys : await fetchKeys(),
      keySource: pins
        ? `${pastedName(doc)} was checked against ${keysFrom}.`
        : `${pastedName(doc)} was checked against the public keys of this service (GET /v1/public-key).`,
      pinned: true,
      checks: [],
    };
  }
  const bundle = doc.bundle;
  const made = `The bundle was made ${bundle.created_at} by ${bundle.service}.`;
  // Pin the bundle's keys: the saved file's, else the keys this service publishes. The keys a
  // bundle carries prove nothing by themselves (anyone can make a key and sign with it).
  let keys = pins ? pins.keys : null;
  let why = '';
  if (!pins) {
    try {
      keys = await fetchKeys();
    } catch (err) {
      if (!(err instanceof PageError)) throw err;
      why = err.message;
    }
  }
  if (keys) {
    const check = core.bundleKeysCheck(bundle.keys, keys, pins ? pinnedName(pins) : null);
    return {
      keys,
      keySource: pins
        ? `The bundle's receipts and chain were checked in this browser against ${keysFrom}. ${made}`
        : 'The bundle\'s receipts and chain were checked in this browser against the keys this service publishes ' +
          `(GET /v1/public-key, the only key request). ${made}`,
      pinned: true,
      checks: [{ ...check, reason: 'bad_signature' }],
    };
  }
  const unpinned = {
    id: 'bundle_keys',
    ok: false,
    unchecked: true,
    reason: 'no_keys',
    title: 'Bundle keys',
    detail:
      `${why} No saved key set or trust root was given either, so the checks below use the keys the bundle carries, ` +
      "and nothing shows they are the service's.",
  };
  return { keys: bundle.keys, keySource: `${made} Its keys were not pinned: ${why}`, pinned: false, checks: [unpinned] };
}

/**
 * The certificate check of a receipt's key under a version 2 trust root. Without a certificate
 * at hand the key and signature are not judged (nothing makes the key the service's): NOT
 * VERIFIED no_key_certificate; a certificate the rules refuse is evidence (bad_signature).
 */
async function certificateCheck(receipt, result, certified) {
  const { state, detail } = await certified.judgeReceipt(receipt);
  if (state === 'no_key_certificate') {
    for (const c of result.checks) {
      if ((c.id === 'key' || c.id === 'signature') && !c.ok) Object.assign(c, { reason: 'no_key_certificate', unchecked: true });
    }
  }
  const reason = state === 'no_key_certificate' ? 'no_key_certificate' : 'bad_signature';
  return { id: 'key_certificate', ok: state === 'ok', reason, state, title: 'Key certificate', detail };
}

/** The receipt's own checks (format, hash, key, signature): evidence of a bad signature when one fails. */
async function receiptChecks(receipt, keys, pinned, certified) {
  const result = await core.verifyReceipt(receipt, keys);
  for (const c of result.checks) {
    c.reason = 'bad_signature';
    // The check lines must not call a key the bundle carries "the service's".
    if (pinned || !c.ok) continue;
    if (c.id === 'key') c.detail = `Signed with key "${receipt.sig_kid}", a key the bundle carries (NOT pinned).`;
    if (c.id === 'signature') {
      c.detail =
        `The Ed25519 signature over receipt_hash matches the key "${receipt.sig_kid}" the bundle carries; ` +
        'that shows only that whoever made the bundle holds that key.';
    }
  }
  if (certified) result.checks.push(await certificateCheck(receipt, result, certified));
  return result;
}

async function chainChecks(receipt, bundle, keys, pinned, notes, certified) {
  const chain = await core.verifyChain(receipt, bundle.chain, keys, certified ? certified.judgeReceipt : null);
  for (const c of chain.checks) {
    c.reason = c.reason || 'bad_chain';
    if (!pinned && c.ok && c.id.startsWith('chain_receipt_')) c.detail += ' That key is one the bundle carries (NOT pinned).';
  }
  const count = bundle.chain.length;
  const oldest = chain.oldest;
  let text;
  if (count === 0 && receipt.prev_receipt_hash === null) {
    text = 'The receipt is the first of its chain (no prev_receipt_hash).';
  } else if (core.isObject(oldest) && oldest.prev_receipt_hash === null) {
    text = `The bundle holds ${count} earlier receipt(s), back to the start of the chain.`;
  } else {
    text =
      `The bundle holds ${count} earlier receipt(s); the oldest one links to a receipt that is not included` +
      (bundle.chain_complete === false ? ' (the bundle says its chain is incomplete).' : '.');
    if (bundle.chain_complete === true) {
      chain.checks.push({
        id: 'chain_complete',
        ok: false,
        reason: 'bad_chain',
        title: 'Chain completeness claim',
        detail: 'The bundle says its chain is complete, but its oldest receipt links to an earlier one that is missing.',
      });
    }
  }
  notes.push({ id: 'chain_extent', info: true, ok: true, title: 'Chain', detail: text + ' Later receipts and branches are not visible.' });
  return chain.checks;
}

async function fileChecks(receipt, notes) {
  const checks = [];
  const salt = saltBytes();
  for (const [field, picker, label] of [
    ['input_hash', inputFile, 'input file'],
    ['output_hash', outputFile, 'output file'],
  ]) {
    const file = picker.files && picker.files[0];
    if (!file) continue;
    const computed = await hashFile(file, label, field === 'input_hash' ? salt : null);
    const fileCheck = core.fileHashCheck(field, file.name, computed, receipt[field]);
    fileCheck.reason = 'hash_mismatch';
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
  return checks;
}

/**
 * The log lines: against the pinned log (required), else the service's published log, else
 * none. A Sigstore bundle's are its log entry's (`key`: the attestation's, below).
 */
async function logLines(receipt, parsed, doc, pins, pasted, key) {
  if (doc && doc.sigstore && (pins ? pins.log : serviceLog)) return sigstoreLogLines(doc, key.key, pins, pasted);
  if (pins && pins.log) {
    const proof = parsed.kind === 'id' ? await fetchLogProof(parsed.id) : doc.carriedProof;
    return pinnedLogLines(receipt, proof, pins, pasted, doc ? doc.bundle : null);
  }
  if (pins) {
    const detail =
      pins.kind === 'keys'
        ? 'A saved key set pins no log, so the log was not checked; give a trust root that names the log to check it.'
        : `The trust root "${pins.name}" pins no transparency log: no log check.`;
    return [{ id: 'log', info: true, ok: true, title: 'Transparency log', detail }];
  }
  if (!serviceLog) return [];
  const id = parsed.kind === 'id' ? parsed.id : core.isReceiptId(String(receipt.receipt_id)) ? receipt.receipt_id : null;
  return serviceLogLines(receipt, doc ? doc.bundle : null, id, pasted);
}

async function verify() {
  const support = await supportReady;
  if (!support.ok) throw new PageError(SUPPORT_MESSAGES[support.reason]);
  const parsed = parseUserInput(input.value);
  if (parsed.kind === 'invalid') throw new PageError(parsed.message);
  saltBytes(); // a malformed salt is reported before anything is fetched
  const pins = await savedPins(); // and so is a malformed pinned file
  showPolicyField(pins);
  const pasted = await pastedPolicy(); // and a malformed witness policy
  const doc = parsed.kind === 'document' ? parsed.document : null;

  const chosen = await chooseKeys(parsed, doc, pins);
  let { keys } = chosen;
  let receipt;
  if (parsed.kind === 'id' && chosen.certified) {
    receipt = await fetchReceipt(parsed.id);
    keys = await fetchKeyOf(receipt.sig_kid);
  } else if (parsed.kind === 'id') {
    [receipt, keys] = await Promise.all([fetchReceipt(parsed.id), pins ? pins.keys : fetchKeys()]);
  } else {
    receipt = doc.receipt;
  }
  if (parsed.kind === 'id') {
    const url = new URL(window.location.href);
    url.searchParams.set('receipt_id', parsed.id);
    window.history.replaceState(null, '', url);
  }
  const certified = chosen.certified ? await judgedKeys(pins, keys) : null;
  if (certified) keys = certified.keySet;
  const checks = [...chosen.checks];
  const notes = [];
  const result = await receiptChecks(receipt, keys, chosen.pinned, certified);
  checks.push(...result.checks);
  const key = attest.attestationKey(receipt, keys, result.checks);
  if (doc && doc.attestation) checks.push(...(await attest.documentAttestationChecks(doc, receipt, key)));
  for (const c of await logLines(receipt, parsed, doc, pins, pasted, key)) (c.info ? notes : checks).push(c);
  if (doc && doc.bundle) {
    checks.push(...(await chainChecks(receipt, doc.bundle, keys, chosen.pinned, notes, certified)));
  } else if (typeof receipt.prev_receipt_hash === 'string') {
    const detail = 'The receipt links to an earlier receipt; this page checks chain links only in a bundle.';
    notes.push({ id: 'chain_extent', info: true, ok: true, title: 'Chain', detail });
  }
  checks.push(...(await fileChecks(receipt, notes)));

  const decision = decide(checks);
  const explanation = [];
  let kind;
  let title;
  if (decision.verdict === 'INVALID') {
    kind = 'invalid';
    const failed = decision.failed;
    title = `Invalid (${decision.reason}): ${failed.length} check${failed.length === 1 ? '' : 's'} failed (${failed.map((c) => c.title).join(', ')}).`;
  } else if (decision.verdict === 'NOT VERIFIED') {
    // Nothing is wrong, but something needed to say valid is missing: the verdict is one of
    // valid, invalid and error, so "error", with the reason.
    kind = 'error';
    title =
      decision.reason === 'no_keys'
        ? "Not verified (no_keys): the bundle's keys could not be checked against the service's published keys."
        : `Not verified (${decision.reason}): nothing is wrong, but something needed to say valid is missing.`;
    if (MISSING_NOTES[decision.reason]) explanation.push(el('p', {}, MISSING_NOTES[decision.reason]));
  } else {
    kind = 'valid';
    const keyNote = certified
      ? ' Its key is certified by a receipt root your trust root pins.'
      : result.keyStatus === 'retired'
        ? ' It was signed by a retired key, which is still listed and valid for the receipts it signed.'
        : '';
    const attested = doc && doc.attestation ? ' Its in-toto attestation is signed by the same key.' : '';
    title = 'Valid: the receipt is genuine and unchanged.' + keyNote + attested;
  }
  showVerdict(
    kind,
    title,
    [
      ...explanation,
      facts(receipt),
      checkList([...checks, ...notes]),
      el('p', { class: 'help' }, chosen.keySource),
      el(
        'p',
        { class: 'help' },
        'This shows who issued these hashes and that they were not changed. It does not prove anything about the raw data ' +
          'beyond a matching file hash, nor that the chain is complete, and it does not replace POST /v1/verify.',
      ),
    ],
    decision.reason,
  );
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

/** The witness policy field shows when the service runs a log or the pinned file names one. */
function showPolicyField(pins) {
  policyField.hidden = !(serviceLog || (pins && pins.log));
}

const NO_PINS = "No saved key set or trust root: a bundle's keys are checked against the keys this service publishes.";

async function showKeysFile(file = keysFile.files && keysFile.files[0]) {
  if (!file) {
    keysStatus.textContent = NO_PINS;
    showPolicyField(null);
    return;
  }
  keysStatus.textContent = `Keys are pinned to the saved file "${file.name}": no key request is made.`;
  let pins;
  try {
    pins = await readPinned(await file.text(), file.name);
  } catch (err) {
    keysStatus.textContent = err instanceof ReadError ? err.message : `Could not read "${file.name}".`;
    return;
  }
  if ((keysFile.files && keysFile.files[0]) !== file) return; // another file was chosen meanwhile
  showPolicyField(pins);
  keysStatus.textContent =
    pins.kind === 'keys'
      ? `Keys are pinned to the saved key set "${file.name}": no key request is made.`
      : `Pinned to the trust root "${file.name}": ` +
        (pins.roots
          ? `its ${pins.roots.size} receipt root(s) (a receipt's key counts only through a certificate one of them signed)`
          : `its ${pins.keys.keys.length} receipt key(s)`) +
        (pins.log
          ? `, and the log ${pins.log.origin} with its witness policy: a receipt must be shown to be in that log.`
          : '; it names no log.') +
        ' No key or log request is made for a pasted or dropped document.';
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
