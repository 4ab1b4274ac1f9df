// The verdict and its reason, from the page's checks (docs/verdicts.md: the closed lists every
// surface renders), as a DOM-free ES module. Each check is {id, ok, reason, info?}: a check
// that did not hold names the reason it stands for, an INVALID one (evidence: something was
// checked and is wrong) or a NOT VERIFIED one (nothing is wrong, but something needed to say
// VALID is missing). INVALID wins over NOT VERIFIED; within a verdict the reason is the first
// of the failed checks' reasons in the order of docs/verdicts.md.

export const INVALID_REASONS = [
  'bad_signature',
  'hash_mismatch',
  'bad_chain',
  'receipt_changed',
  'bad_log_proof',
  'bad_checkpoint_signature',
  'bad_timestamp',
];
export const NOT_VERIFIED_REASONS = ['pending', 'no_log_proof', 'no_quorum', 'no_keys', 'no_key_certificate', 'chain_unavailable', 'deleted'];

/** Whether a check that did not hold stands for a NOT VERIFIED reason (not for evidence). */
export function isMissing(check) {
  return NOT_VERIFIED_REASONS.includes(check.reason);
}

function first(order, reasons) {
  return order.find((reason) => reasons.includes(reason));
}

/** The INVALID reason a failed evidence check stands for (one without a known reason: bad_signature). */
function evidence(check) {
  return INVALID_REASONS.includes(check.reason) ? check.reason : 'bad_signature';
}

/**
 * {verdict: 'VALID' | 'INVALID' | 'NOT VERIFIED', reason (null when VALID), failed (the checks
 * that decided it)}. A failed check without a reason is evidence (bad_signature): the page
 * never lets an unnamed failure pass for "missing".
 */
export function decide(checks) {
  const failed = checks.filter((c) => !c.ok && !c.info);
  const invalid = failed.filter((c) => !isMissing(c));
  if (invalid.length > 0) return { verdict: 'INVALID', reason: first(INVALID_REASONS, invalid.map(evidence)), failed: invalid };
  if (failed.length > 0) {
    return { verdict: 'NOT VERIFIED', reason: first(NOT_VERIFIED_REASONS, failed.map((c) => c.reason)), failed };
  }
  return { verdict: 'VALID', reason: null, failed: [] };
}

/** The note of a NOT VERIFIED verdict: what is missing, and what supplies it (a trust root first). */
export const MISSING_NOTES = {
  pending:
    'The log has not included this receipt yet (the log adds it within seconds). Wait, then save its bundle again ' +
    '(execution-proof bundle RECEIPT_ID --wait 60 --out FILE) and check that, with your trust root as the saved key set.',
  no_log_proof:
    'Your trust root names a transparency log, so the receipt must be shown to be in it, and this document carries ' +
    'no log proof. Give the receipt\'s bundle (execution-proof bundle RECEIPT_ID --wait 60 --out FILE) or, for an ' +
    'attestation, its Sigstore bundle (execution-proof attest RECEIPT_ID --sigstore --wait 60), or check the receipt ' +
    'by its id on the service, which gives its proof.',
  no_quorum:
    "The checkpoint of the receipt's log proof is cosigned by fewer witnesses than the pinned policy's quorum: " +
    'nothing is wrong, but independent witnesses have not yet vouched for it. Save the bundle again later ' +
    '(execution-proof bundle RECEIPT_ID --out FILE) and check it with your trust root.',
  no_key_certificate:
    'Your trust root pins receipt roots, not keys, and no certificate for the key that signed this receipt is at ' +
    'hand (a DSSE envelope or a Sigstore bundle carries none). Give the receipt\'s bundle ' +
    '(execution-proof bundle RECEIPT_ID --out FILE), which carries it and the attestation, or check the receipt by ' +
    'its id on the service, which gives it (execution-proof verify RECEIPT_ID --trust-root FILE --online does the ' +
    'same; for an attestation, execution-proof verify FILE --trust-root FILE --keys DIR/keys.json with the keys ' +
    'execution-proof trust-root --sigstore DIR wrote).',
  no_keys:
    "The signatures match the keys the bundle carries, but those keys were not checked against the service's " +
    'published keys: NOT verified. Give this page your trust root (execution-proof trust-root) or a saved key set ' +
    'as the "Saved key set", or open it on the service.',
};
