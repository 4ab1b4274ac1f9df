// The requests of the verification page (docs/verify-page.md), all to its own origin, with
// no credentials and no cache: a receipt by id (the answer must be the receipt asked for), the
// service's keys (all of them, or one kid with its certificate), a receipt's log proof. What
// fails is a PageError naming the request: the page says "could not verify".

import { isObject } from './verify-core.js';
import { PageError } from './verify-lines.js';

/** The JSON body of a GET; a PageError when it fails, is not JSON or is not a 2xx answer. */
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
    const message = isObject(body) && isObject(body.error) ? String(body.error.message) : '';
    if (response.status === 404) throw new PageError(`Not found: ${what} does not exist on this service${message ? ` (${message})` : ''}.`);
    throw new PageError(`The service refused to give ${what}: HTTP ${response.status}${message ? ` (${message})` : ''}.`);
  }
  return body;
}

/** The service's key set (GET /v1/public-key). */
export async function fetchKeys() {
  const keys = await fetchJson('/v1/public-key', "the service's public keys");
  if (!isObject(keys) || !Array.isArray(keys.keys)) throw new PageError("The service's key list is malformed.");
  return keys;
}

/** The receipt's key and its certificate (GET /v1/public-key?kid=K); a kid the service does not list: no key. */
export async function fetchKeyOf(kid) {
  const path = '/v1/public-key?kid=' + encodeURIComponent(String(kid));
  let response;
  try {
    response = await fetch(path, { headers: { Accept: 'application/json' }, credentials: 'omit', cache: 'no-store' });
  } catch (err) {
    throw new PageError(`Could not reach the service to fetch the receipt's key (network failure: ${err.message || err}).`);
  }
  if (response.status === 404) return { keys: [], active_kid: null };
  if (!response.ok) throw new PageError(`The service refused to give the receipt's key: HTTP ${response.status}.`);
  let keys;
  try {
    keys = JSON.parse(await response.text());
  } catch {
    throw new PageError("The service's answer for the receipt's key is not valid JSON.");
  }
  if (!isObject(keys) || !Array.isArray(keys.keys)) throw new PageError("The service's key list is malformed.");
  return keys;
}

/** The receipt asked for by id (GET /v1/receipts/{id}). */
export async function fetchReceipt(id) {
  const body = await fetchJson('/v1/receipts/' + encodeURIComponent(id), `the receipt ${id}`);
  if (!isObject(body) || !isObject(body.receipt)) throw new PageError('The service answered without a receipt.');
  // A genuine receipt of another id would pass every check: the answer must be the one asked for.
  if (body.receipt.receipt_id !== id) {
    throw new PageError(`The service answered with the receipt ${String(body.receipt.receipt_id)} when asked for ${id}; it is not checked.`);
  }
  return body.receipt;
}

/** The proof of a receipt asked for by id, against a pinned log: the text, or null while pending. */
export async function fetchLogProof(id) {
  let response;
  try {
    response = await fetch(`/v1/receipts/${encodeURIComponent(id)}/log-proof`, { credentials: 'omit', cache: 'no-store' });
  } catch (err) {
    throw new PageError(`Could not reach the service to fetch the receipt's log proof (network failure: ${err.message || err}).`);
  }
  if (response.status === 409) return null;
  if (!response.ok) throw new PageError(`The service refused to give the receipt's log proof: HTTP ${response.status}.`);
  return response.text();
}
