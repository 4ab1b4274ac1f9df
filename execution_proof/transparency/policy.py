"""C2SP tlog-policy: which logs and witnesses to trust, and the quorum of cosignatures a
checkpoint needs. Pure.

    log <vkey> [<url>]
    witness <name> <vkey> [<url>]
    group <name> all|any|<k> <name>...
    quorum <name>            # or: quorum none
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from execution_proof.transparency import cosignature, note
from execution_proof.transparency.errors import LogError

MAX_LOGS = 256
MAX_WITNESSES = 256
MAX_GROUPS = 256
"""Per kind, well above what tlog-policy asks every implementation to take (32 of each)."""
COSIGNATURE_SKEW_S = 300
"""How far in the future a cosignature's time may be and still count (witnesses' clocks
drift; ``LOG_COSIGNATURE_SKEW_S``)."""


class PolicyError(LogError, ValueError):
    """A malformed policy (the message names the line)."""


@dataclass(frozen=True)
class Witness:
    name: str
    key: cosignature.CosignerKey
    url: str | None = None


@dataclass
class Policy:
    logs: list[tuple[note.Verifier, str | None]] = field(default_factory=list)
    witnesses: dict[str, Witness] = field(default_factory=dict)
    groups: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    quorum: str = "none"
    text: str = ""

    def log_keys(self) -> list[note.Verifier]:
        return [key for key, _ in self.logs]

    def log_key(self) -> note.Verifier:
        """The one log the policy names; ``PolicyError`` when it names none or several (a
        verifier must then be told which log key to pin)."""
        keys = self.log_keys()
        if len(keys) != 1:
            raise PolicyError("the policy names no log or several: give the log key too (--log-key)")
        return keys[0]

    def satisfied(self, cosigned: set[str]) -> bool:
        """Whether witnesses named ``cosigned`` (policy names) meet the quorum."""
        if self.quorum == "none":
            return True
        return self._witnessed(self.quorum, cosigned)

    def _witnessed(self, name: str, cosigned: set[str]) -> bool:
        if name in self.witnesses:
            return name in cosigned
        threshold, members = self.groups[name]
        return sum(self._witnessed(member, cosigned) for member in members) >= threshold


def parse_policy(text: str | bytes) -> Policy:
    """A C2SP tlog-policy, to the letter: logs and witnesses in any order; a group or the
    quorum names only what was defined above it; each name is a member of at most one group
    (so a witness counts once towards the quorum); thresholds 1..n in ASCII decimal; no
    duplicate log key or duplicate witness key (the same public key under another name or id
    is a duplicate); exactly one quorum line. Octets with the high bit set are opaque (names
    compare byte for byte): ``bytes`` that are not UTF-8 are read with surrogate escapes."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    policy = Policy(text=text)
    log_keys: set[bytes] = set()
    witness_keys: set[bytes] = set()
    member_of: dict[str, str] = {}
    quorum_lines = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip(" \t")
        if not line or line.startswith("#"):
            continue
        if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in line):
            raise PolicyError(f"line {number}: control characters")
        words = [word for word in line.replace("\t", " ").split(" ") if word]  # spaces and tabs only
        kind = words[0]
        try:
            if kind == "log" and len(words) in (2, 3):
                key = note.Verifier.parse(words[1])
                if key.public_key in log_keys:
                    raise PolicyError(f"line {number}: a duplicate log key")
                log_keys.add(key.public_key)
                _room(len(policy.logs), MAX_LOGS, "logs", number)
                policy.logs.append((key, words[2] if len(words) == 3 else None))
            elif kind == "witness" and len(words) in (3, 4):
                name = words[1]
                _new_name(policy, name, number)
                witness_key = cosignature.CosignerKey.parse(words[2])
                if witness_key.public_key in witness_keys:
                    raise PolicyError(f"line {number}: a duplicate witness key")
                witness_keys.add(witness_key.public_key)
                _room(len(policy.witnesses), MAX_WITNESSES, "witnesses", number)
                policy.witnesses[name] = Witness(name, witness_key, words[3] if len(words) == 4 else None)
            elif kind == "group" and len(words) >= 4:
                name, rule, members = words[1], words[2], words[3:]
                _new_name(policy, name, number)
                for member in members:
                    if member == "none" or (member not in policy.witnesses and member not in policy.groups):
                        raise PolicyError(f"line {number}: {member!r} is not a witness or group defined above")
                    if member in member_of:
                        group = member_of[member]
                        where = "in this group twice" if group == name else f"already a member of group {group!r}"
                        raise PolicyError(f"line {number}: {member!r} is {where}")
                    member_of[member] = name
                if rule == "all":
                    threshold = len(members)
                elif rule == "any":
                    threshold = 1
                elif rule.isascii() and rule.isdigit() and 1 <= int(rule) <= len(members) and not rule.startswith("0"):
                    threshold = int(rule)
                else:
                    raise PolicyError(f"line {number}: the threshold is all, any or 1..{len(members)}")
                _room(len(policy.groups), MAX_GROUPS, "groups", number)
                policy.groups[name] = (threshold, members)
            elif kind == "quorum" and len(words) == 2:
                quorum_lines += 1
                if quorum_lines > 1:
                    raise PolicyError(f"line {number}: a second quorum line")
                if words[1] != "none" and words[1] not in policy.witnesses and words[1] not in policy.groups:
                    raise PolicyError(f"line {number}: the quorum names nothing defined above")
                policy.quorum = words[1]
            else:
                raise PolicyError(f"line {number}: not a log, witness, group or quorum line")
        except note.NoteError as exc:
            raise PolicyError(f"line {number}: {exc}") from exc
    if quorum_lines != 1:
        raise PolicyError("a policy has exactly one quorum line")
    return policy


def cosignature_skew(env: Mapping[str, str]) -> int:
    """``LOG_COSIGNATURE_SKEW_S`` of an environment (0 to 86400 seconds; default 300): the
    service, ``verify`` and ``monitor`` read the same variable and so apply the same quorum."""
    raw = (env.get("LOG_COSIGNATURE_SKEW_S") or "").strip()
    if not raw:
        return COSIGNATURE_SKEW_S
    if not raw.isascii() or not raw.isdigit() or int(raw) > 86400:
        raise PolicyError("LOG_COSIGNATURE_SKEW_S must be seconds, 0 to 86400")
    return int(raw)


def _room(count: int, limit: int, what: str, number: int) -> None:
    if count >= limit:
        raise PolicyError(f"line {number}: more than {limit} {what}")


def _new_name(policy: Policy, name: str, number: int) -> None:
    if name == "none" or name in policy.witnesses or name in policy.groups:
        raise PolicyError(f"line {number}: the name {name!r} is taken")


@dataclass(frozen=True)
class QuorumCheck:
    ok: bool
    reason: str
    cosigned: dict[str, int]
    """Policy witness name -> cosignature time (valid cosignatures only)."""


def check_quorum(note_text: str | bytes, policy: Policy, now: int, skew_s: int = COSIGNATURE_SKEW_S) -> QuorumCheck:
    """The checkpoint note's log signature (by a log of the policy) and its cosignatures
    against the quorum: unknown keys ignored, cosignatures dated more than ``skew_s`` seconds
    after ``now`` not counted (a witness's clock may run a little ahead; one far ahead is
    not a witness to trust for this checkpoint)."""
    try:
        parsed, _ = note.verify_note(note_text, policy.log_keys())
    except note.NoteError as exc:
        return QuorumCheck(False, f"no log of the policy signed the checkpoint: {exc}", {})
    cosigned, future = _counted(parsed, policy, now + skew_s)
    if policy.satisfied(set(cosigned)):
        met = f"cosigned by {', '.join(sorted(cosigned))}" if cosigned else "the policy requires no witness"
        return QuorumCheck(True, f"the quorum is met ({met})", cosigned)
    extra = f"; dated in the future, not counted: {', '.join(future)}" if future else ""
    names = ", ".join(sorted(cosigned)) or "none"
    return QuorumCheck(False, f"the quorum {policy.quorum!r} is NOT met (valid cosignatures: {names}{extra})", cosigned)


def cosigned_enough(note_text: str, policy: Policy, now: int, skew_s: int = COSIGNATURE_SKEW_S) -> bool:
    """Whether the cosignatures of a checkpoint the caller signed itself meet the quorum (the
    log's signature is not checked: the log asks this of its own checkpoints)."""
    try:
        parsed = note.parse_note(note_text)
    except note.NoteError:
        return False
    return policy.satisfied(set(_counted(parsed, policy, now + skew_s)[0]))


def _counted(parsed: note.Note, policy: Policy, latest: int) -> tuple[dict[str, int], list[str]]:
    """(witness name -> time of each valid cosignature dated no later than ``latest``, the
    names of the valid ones dated after it)."""
    by_key = {w.key: w for w in policy.witnesses.values()}
    found = cosignature.cosignatures(parsed, list(by_key))
    cosigned = {by_key[key].name: at for key, at in found.items() if at <= latest}
    future = sorted(by_key[key].name for key, at in found.items() if at > latest)
    return cosigned, future
