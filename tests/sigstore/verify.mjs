// Verify a receipt's Sigstore bundle (GET /v1/receipts/{id}/attestation?format=sigstore)
// with sigstore's own verifier, against the files `execution-proof trust-root --sigstore DIR`
// wrote. Usage: node verify.mjs BUNDLE.json DIR
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { bundleFromJSON } from '@sigstore/bundle';
import { PublicKey, TrustedRoot } from '@sigstore/protobuf-specs';
import { Verifier, toSignedEntity, toTrustMaterial } from '@sigstore/verify';

const [bundlePath, dir] = process.argv.slice(2);
const read = (path) => JSON.parse(readFileSync(path, 'utf8'));

// The log (its checkpoint key), and the receipt keys by kid (DER SPKI, standard base64).
const trustedRoot = TrustedRoot.fromJSON(read(join(dir, 'trusted_root.json')));
const keys = Object.fromEntries(
  Object.entries(read(join(dir, 'keys.json'))).map(([kid, der]) => [kid, PublicKey.fromJSON({ rawBytes: der })]),
);
// One log entry with its inclusion proof; no CT log, no time-stamp authority.
const verifier = new Verifier(toTrustMaterial(trustedRoot, keys), {
  tlogThreshold: 1,
  ctlogThreshold: 0,
  timestampThreshold: 0,
});

const bundle = bundleFromJSON(read(bundlePath));
try {
  verifier.verify(toSignedEntity(bundle));
} catch (error) {
  console.log(JSON.stringify({ verified: false, code: error.code ?? error.name, message: error.message }));
  process.exit(1);
}
// Verified: the payload is the receipt's in-toto Statement; a policy checks its subject.
const statement = JSON.parse(bundle.content.dsseEnvelope.payload.toString('utf8'));
console.log(JSON.stringify({ verified: true, subject: statement.subject }));
