// The public verification page (docs/verify-page.md). Wiring only: the checks themselves live
// in verify-core.js (shared with the Node.js tests) and the streaming hash in sha256.js.
// No inline handlers, no third-party code. The only requests this page makes are
// GET /v1/receipts/{id} and GET /v1/public-key on its own origin, and none for a bundle.

import * as core from './verify-core.js';
import { Sha256 } from './sha256.js';

const CHUNK_BYTES = 4 * 1024 * 1024;

const form = document.getElementById('verify-form');
const input = document.getElementById('receipt-input');
const bundleFile = document.getElementById('bundle-file');
const dropZone = document.getElementById('bundle-drop');
const inputFile = document.getElementById('input-file');
const outputFile = document.getElementById('output-file');
const saltInput = document.getElementById('input-salt');
const button = document.getElementById('verify-button');
const progressBox = document.getElementById('progress-box');
const progressLabel = document.getElementById('progress-label');
const progress = document.getElementById('hash-progress');
const verdict = document.getElementById('verdict');
const supportBox = document.getElementById('support');

class PageError extends Error {}

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
    const state = c.info ? 'info' : c.ok ? 'pass' : 'fail';
    const mark = c.info ? 'Note' : c.ok ? 'Pass' : 'Fail';
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

async function verify() {
  const support = await supportReady;
  if (!support.ok) throw new PageError(SUPPORT_MESSAGES[support.reason]);
  const parsed = core.parseUserInput(input.value);
  if (parsed.kind === 'invalid') throw new PageError(parsed.message);
  saltBytes(); // a malformed salt is reported before anything is fetched

  let receipt;
  let keys;
  let keySource;
  let bundle = null;
  if (parsed.kind === 'id') {
    [receipt, keys] = await Promise.all([fetchReceipt(parsed.id), fetchKeys()]);
    keySource = 'Receipt and public keys were fetched from this service (GET /v1/receipts/{id}, GET /v1/public-key).';
    const url = new URL(window.location.href);
    url.searchParams.set('receipt_id', parsed.id);
    window.history.replaceState(null, '', url);
  } else if (parsed.kind === 'receipt') {
    receipt = parsed.receipt;
    keys = await fetchKeys();
    keySource = 'The pasted receipt was checked against the public keys of this service (GET /v1/public-key).';
  } else {
    bundle = parsed.bundle;
    receipt = bundle.receipt;
    keys = bundle.keys;
    keySource =
      `Checked offline: the keys come from the bundle itself (made ${String(bundle.created_at)} by ` +
      `${String(bundle.service)}), so this result is as trustworthy as the place you got the bundle from.`;
  }

  const result = await core.verifyReceipt(receipt, keys);
  const checks = [...result.checks];
  const notes = [];

  if (bundle) {
    const chain = await core.verifyChain(receipt, bundle.chain === undefined ? [] : bundle.chain, keys);
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

  const failed = checks.filter((c) => !c.ok);
  const valid = failed.length === 0;
  const keyNote = result.keyStatus === 'retired' ? ' It was signed by a retired key, which is still listed and valid for the receipts it signed.' : '';
  const title = valid
    ? 'Valid: the receipt is genuine and unchanged.' + keyNote
    : `Invalid: ${failed.length} check${failed.length === 1 ? '' : 's'} failed (${failed.map((c) => c.title).join(', ')}).`;
  showVerdict(valid ? 'valid' : 'invalid', title, [
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

async function run() {
  button.disabled = true;
  verdict.setAttribute('aria-busy', 'true');
  showVerdict('', 'Checking…', []);
  try {
    await verify();
  } catch (err) {
    showError(err instanceof PageError ? err.message : `Unexpected error: ${err && err.message ? err.message : err}`);
  } finally {
    progressBox.hidden = true;
    button.disabled = false;
    verdict.removeAttribute('aria-busy');
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
});

bundleFile.addEventListener('change', () => loadDocumentFile(bundleFile.files && bundleFile.files[0]));

for (const name of ['dragenter', 'dragover']) {
  dropZone.addEventListener(name, (event) => {
    event.preventDefault();
    dropZone.classList.add('dragging');
  });
}
dropZone.addEventListener('dragleave', () => dropZone.classList.remove('dragging'));
dropZone.addEventListener('drop', (event) => {
  event.preventDefault();
  dropZone.classList.remove('dragging');
  loadDocumentFile(event.dataTransfer && event.dataTransfer.files[0]);
});
// A file dropped anywhere else must not make the browser navigate away (or open it).
window.addEventListener('dragover', (event) => event.preventDefault());
window.addEventListener('drop', (event) => event.preventDefault());

const fromUrl = new URLSearchParams(window.location.search).get('receipt_id');
if (fromUrl) {
  input.value = fromUrl;
  run();
}
