"""The transparency log's core: entries and the Merkle tree (tlog.py), signed notes and
checkpoints (note.py), cosignatures, witness policies, tiles, RFC 3161 time-stamps, what a
monitor checks and a receipt against the log. Pure: no I/O of its own, nothing of the
receipts, the stores or the server.
"""
