// What the verification page shows (docs/verify-page.md): the DOM helpers, and the lines of
// the transparency-log checks. The log is checked against the pinned log (a trust root's log
// key and witness policy, with no request at all for a document) or, with nothing pinned, on a
// service that runs a log (<body data-log="on">), against what GET /v1/log publishes. Each line
// is a check {id, ok, reason, title, detail}: a failed one names its reason (docs/verdicts.md),
// evidence (bad_log_proof, bad_checkpoint_signature) or a missing piece (pending, no_log_proof,
// no_quorum).

import { sigstoreEntryCheck } from './verify-attest.js';
import * as tlog from './verify-log.js';
import { isMissing } from './verify-verdict.js';

/** What stops the check ("could not verify"): the page shows its message, and no verdict. */
export class PageError extends Error {}

// ------------------------------------------------------------------ DOM

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

export function checkList(checks) {
  const list = el('ul', { class: 'checks' });
  for (const c of checks) {
    let state = c.ok ? 'pass' : 'fail';
    let mark = c.ok ? 'Pass' : 'Fail';
    if (c.info) [state, mark] = ['info', 'Note'];
    else if (c.unchecked) [state, mark] = ['info', 'Not checked'];
    else if (!c.ok && isMissing(c)) [state, mark] = ['missing', 'Not verified'];
    const attrs = { class: state, 'data-check': c.id, 'data-ok': String(Boolean(c.ok)) };
    if (!c.ok && !c.info && c.reason) attrs['data-reason'] = c.reason;
    // A key judged by the roots of a version 2 trust root: which rule held or failed (verify-keys.js STATES).
    if (c.state) attrs['data-state'] = c.state;
    const item = el('li', attrs);
    item.append(el('span', { class: 'mark' }, mark + ':'), el('strong', {}, c.title + '. '), c.detail);
    list.append(item);
  }
  return list;
}

export function facts(receipt) {
  const dl = el('dl', { class: 'facts' });
  for (const key of ['receipt_id', 'project_id', 'created_at', 'input_hash', 'output_hash', 'receipt_hash']) {
    if (receipt && typeof receipt[key] === 'string') dl.append(el('dt', {}, key), el('dd', {}, receipt[key]));
  }
  return dl;
}

/** POSIX seconds (a BigInt) as "YYYY-MM-DD HH:MM:SS UTC", or the number when no date has it. */
export function utc(seconds) {
  const ms = Number(seconds) * 1000;
  if (!(Math.abs(ms) <= 8.64e15)) return `time ${seconds}`;
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d{3}Z$/, ' UTC');
}

// ------------------------------------------------------------------ the log lines

const TITLE = 'Transparency log';

const LOG_MEANING =
  'The log key signed a tree that holds this receipt at that place: the service cannot remove it, or show ' +
  'someone a history without it, without signing two inconsistent checkpoints. It does not prove when the ' +
  'receipt was made, nor that everyone is shown the same log.';

const QUORUM_MEANING =
  'What it proves: each counted cosignature is a witness saying that, at its time, this checkpoint was consistent ' +
  'with every checkpoint of this log it had seen before; with the quorum met, independent witnesses saw this ' +
  'checkpoint consistent with every one they saw before, so a log showing others a different history would have ' +
  'had to fool them too. What it does not prove: that the witnesses are in fact independent of the service or of ' +
  'each other (that rests on the policy: pin one you got elsewhere, in your trust root), when the receipt was made ' +
  "(a cosignature time is the witness's clock, and only says the checkpoint existed then), or anything about the " +
  'data behind the hashes.';

const COSIGNATURE_STATUS = {
  valid: 'verifies, counted',
  future: `verifies, but is dated more than ${tlog.COSIGNATURE_SKEW_S} s after this browser's clock: not counted`,
  superseded: 'verifies, but a later cosignature by the same key is the one counted',
  invalid: 'does NOT verify (forged, damaged or made for another checkpoint): not counted',
};

/** The inclusion line of a proof against a log key: {check, note (the proof's checkpoint, or null)}. */
export async function inclusionLine(receipt, proof, vkey, keyFrom) {
  let note = null;
  try {
    note = tlog.parseProof(proof).note;
  } catch {
    // The line below says why the proof cannot be read.
  }
  try {
    const found = await tlog.checkInclusion(receipt, proof, vkey);
    const detail =
      `In the log at index ${found.index}, checkpoint of size ${found.size} signed by ${found.origin} ` +
      `(the log key ${keyFrom}). ${LOG_MEANING}`;
    return { check: { id: 'log', ok: true, title: TITLE, detail }, note };
  } catch (err) {
    const reason = err instanceof tlog.LogProofError ? err.reason : 'bad_log_proof';
    const what = reason === 'bad_checkpoint_signature' ? 'The checkpoint is not signed by the log key' : 'Not shown to be in the log';
    const detail = `${what} ${keyFrom}: ${err.message}.`;
    return { check: { id: 'log', ok: false, reason, title: TITLE, detail }, note };
  }
}

/** A log line that stands for a missing proof (pending, no_log_proof). */
export function missingLine(reason, detail) {
  return { id: 'log', ok: false, reason, title: TITLE, detail };
}

/**
 * The witness-quorum line: the checkpoint's cosignatures against `policy` (parsed), `source`
 * saying where the policy comes from. Below the quorum is NOT VERIFIED (no_quorum); a
 * checkpoint no log of the policy signed is evidence (bad_checkpoint_signature).
 */
export async function quorumLine(checkpointNote, policy, source) {
  const title = 'Witness quorum';
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
  const one = counted.length === 1;
  let verdictText;
  if (!result.logSigned) verdictText = `Witness quorum NOT met: ${result.reason}.`;
  else if (result.ok) verdictText = `Witness quorum met: ${what} ${one ? 'meets' : 'meet'} the policy's quorum, ${rule}.`;
  else verdictText = `Witness quorum NOT met: ${what} ${one ? 'does' : 'do'} not meet the policy's quorum, ${rule}.`;
  const detail = el(
    'div',
    { class: 'quorum' },
    el('p', { class: 'quorum-verdict' }, verdictText),
    el('p', {}, `${source} Cosignatures dated after ${utc(BigInt(now + tlog.COSIGNATURE_SKEW_S))} (this browser's clock and ${tlog.COSIGNATURE_SKEW_S} s for witnesses' clocks) are not counted.`),
    rows,
    el('p', { class: 'help' }, `As execution-proof verify --trust-root (or --log-policy) says it: ${result.reason}.`),
    el('p', { class: 'help' }, QUORUM_MEANING),
  );
  const reason = result.ok ? undefined : result.logSigned ? 'no_quorum' : 'bad_checkpoint_signature';
  return { id: 'log_quorum', ok: result.ok, reason, title, detail };
}

/** The note on a bundle's RFC 3161 time-stamps, counted only (their DER is not read here). */
export function timestampsNote(bundle) {
  if (!bundle || !Array.isArray(bundle.timestamps)) return null;
  const n = bundle.timestamps.length;
  const detail =
    n === 0
      ? ['The bundle carries no RFC 3161 time-stamp of this checkpoint.']
      : [`${n} RFC 3161 time-stamp${n === 1 ? '' : 's'}: check them with `, el('code', {}, 'execution-proof verify --trust-root FILE'), ' (its TSA roots).'];
  return { id: 'log_timestamps', info: true, ok: true, title: 'Time-stamps', detail: el('span', {}, ...detail) };
}

/**
 * The log lines against a pinned log (a trust root's): inclusion is required. `proof` is the
 * proof the document carries or the service gave (a string), null while the log has not
 * included the receipt, undefined when there is none at all. `pasted` (a parsed policy, or
 * null) replaces the trust root's policy for the quorum.
 */
export async function pinnedLogLines(receipt, proof, pins, pasted, bundle) {
  const root = `of the trust root "${pins.name}"`;
  if (proof === undefined) {
    return [
      missingLine(
        'no_log_proof',
        `The trust root "${pins.name}" pins the log ${pins.log.origin}, so this receipt's inclusion in it is required, ` +
          'and this document carries no log proof (a plain receipt, a saved create response, a DSSE envelope, or a ' +
          'bundle of a service without a log). It was checked offline: the page asked the service for nothing.',
      ),
    ];
  }
  if (proof === null) {
    return [
      missingLine(
        'pending',
        `Pending: no checkpoint of the log ${pins.log.origin} covered this receipt when the proof was asked for ` +
          '(the log adds it within seconds).',
      ),
    ];
  }
  const inclusion = await inclusionLine(receipt, proof, pins.log.vkey, root);
  const out = [inclusion.check];
  if (inclusion.note !== null) {
    const source = pasted
      ? 'Policy: the one you pasted on this page (the trust root\'s was not used).'
      : `Policy: the witness policy ${root}.`;
    out.push(await quorumLine(inclusion.note, pasted || pins.log.policy, source));
  }
  const stamps = timestampsNote(bundle);
  if (stamps) out.push(stamps);
  return out;
}

const logNote = (detail) => [{ id: 'log', info: true, ok: true, title: TITLE, detail }];

/** What GET /v1/log publishes ({info}), or the note that says why there is nothing to check against ({lines}). */
async function publishedLog() {
  try {
    const response = await fetch('/v1/log', { headers: { Accept: 'application/json' } });
    if (response.status === 503) return { lines: logNote('This service runs without a transparency log.') };
    if (!response.ok) throw new Error(`GET /v1/log answered HTTP ${response.status}`);
    return { info: await response.json() };
  } catch (err) {
    return { lines: logNote(`The log could not be read: ${err.message}`) };
  }
}

/**
 * The log lines of a Sigstore bundle (verify-attest.js): its tlog entry, the attestation's
 * dsse leaf, whose inclusion stands for the receipt's in this form. Against the pinned log (a
 * trust root's: required, offline; no entry is NOT VERIFIED no_log_proof) or, with nothing
 * pinned, against the log GET /v1/log names (no entry is only a note). `key` is the receipt's
 * raw key (null when none is at hand).
 */
export async function sigstoreLogLines(doc, key, pins, pasted) {
  const { entry } = doc.sigstore;
  let vkey;
  let keyFrom;
  let policy;
  let source;
  if (pins) {
    if (entry === null) {
      return [
        missingLine(
          'no_log_proof',
          `The trust root "${pins.name}" pins the log ${pins.log.origin}, so the attestation's inclusion in it is ` +
            'required, and this Sigstore bundle carries no tlogEntries (a service without a log writes it so). It was ' +
            'checked offline: the page asked the service for nothing.',
        ),
      ];
    }
    [vkey, keyFrom] = [pins.log.vkey, `of the trust root "${pins.name}"`];
    policy = pasted || pins.log.policy;
    source = pasted ? "Policy: the one you pasted on this page (the trust root's was not used)." : `Policy: the witness policy ${keyFrom}.`;
  } else {
    if (entry === null) return logNote('This Sigstore bundle carries no log entry (tlogEntries): its log inclusion was not checked.');
    const published = await publishedLog();
    if (published.lines) return published.lines;
    [vkey, keyFrom, policy] = [published.info.log_vkey, 'this service publishes (GET /v1/log)', published.info.policy];
  }
  const result = await sigstoreEntryCheck(entry, doc.attestation, key, vkey, keyFrom);
  const quorum = pins ? await quorumLine(result.note, policy, source) : await publishedQuorumLine(result.note, policy, pasted);
  return [result.check, quorum];
}

/**
 * The log lines with nothing pinned, on a service that runs a log: its key and policy as
 * GET /v1/log publishes them (the service's word), the proof the bundle carries, else
 * GET /v1/receipts/{id}/log-proof. A missing proof is only a note here: nothing pinned asks
 * for the log.
 */
export async function serviceLogLines(receipt, bundle, receiptId, pasted) {
  const published = await publishedLog();
  if (published.lines) return published.lines;
  const { info } = published;
  let proof = null;
  if (bundle) {
    proof = bundle.log && typeof bundle.log.proof === 'string' ? bundle.log.proof : null;
  } else if (receiptId) {
    const response = await fetch(`/v1/receipts/${receiptId}/log-proof`);
    if (response.ok) proof = await response.text();
    else if (response.status !== 409) return logNote(`GET log-proof answered HTTP ${response.status}.`);
  }
  if (proof === null) return logNote('Pending: no published checkpoint covers this receipt yet (the log adds it within seconds).');
  const inclusion = await inclusionLine(receipt, proof, info.log_vkey, 'this service publishes (GET /v1/log)');
  const out = [inclusion.check];
  if (inclusion.note !== null) out.push(await publishedQuorumLine(inclusion.note, info.policy, pasted));
  const stamps = timestampsNote(bundle);
  if (stamps) out.push(stamps);
  return out;
}

async function publishedQuorumLine(checkpointNote, published, pasted) {
  const title = 'Witness quorum';
  if (pasted) {
    const source = 'Policy: the one you pasted on this page (the policy this service publishes was not used).';
    return quorumLine(checkpointNote, pasted, source);
  }
  if (typeof published !== 'string' || published.trim() === '') {
    const detail = 'This service publishes no witness policy and none was pasted: cosignatures were not checked.';
    return { id: 'log_quorum', info: true, ok: true, title, detail };
  }
  let policy;
  try {
    policy = await tlog.parsePolicy(published);
  } catch (err) {
    throw new PageError(`The witness policy this service publishes (GET /v1/log) cannot be read: ${err.message}.`);
  }
  const source = 'Policy: the one this service publishes (GET /v1/log); paste another above, or pin one in a trust root.';
  return quorumLine(checkpointNote, policy, source);
}
