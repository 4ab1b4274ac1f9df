"""Pure core of the Execution Proof Service: receipt format, hashing, signing, validation.

Imports neither redis nor sanic; the offline verifier and the browser page mirror it.
"""
