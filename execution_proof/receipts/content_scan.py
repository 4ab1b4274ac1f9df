"""Format scan for forbidden content in client strings (docs/decisions.md, "Content scan").

The scan looks for shapes of personal data and credentials. It is not exhaustive: a value
that passes is not thereby allowed by the terms. A match names the field and the kind of
match; the value itself is never echoed.

Linear time, by construction. A text is first normalised (``normalise``), then each kind is
checked in two steps:

- *locate*: one ``finditer`` of a pattern that starts at an anchor (``@``, a digit, ``+``,
  ``eyJ``, a key prefix...) and consumes the run of characters the shape is made of
  possessively, so that its matches never overlap and a position that starts none costs O(1).
  Each match, plus at most 8 characters after it, is a candidate window.
- *confirm*: a pattern searched only inside the window (``search(text, start, end)``), whose
  repeats are bounded, possessive or atomic, or, for card numbers, arithmetic over the window.

``candidates`` exposes the windows: a kind's windows do not overlap (but for their short
tails), so their total length stays within a small multiple of the text's, which
tests/test_content_scan.py checks on adversarial shapes. No pattern searches from every
position over an unbounded stretch any more, which is what made ``"a." * 512`` quadratic.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import accumulate

KINDS = (
    "private_key",
    "api_key",
    "jwt",
    "bearer_token",
    "cloud_credential",
    "email",
    "card_number",
    "phone_number",
)
"""Every kind ``find_forbidden`` can report, in the order they are checked."""

Candidate = tuple[str, int, int]
"""(kind, start, end): a window of the normalised text that one check examines."""

# Characters of base64url tokens (keys, JWT segments).
_B64URL = r"A-Za-z0-9_\-"

# private_key: "-----BEGIN ", label words, "PRIVATE KEY-----". Located: the anchor and its
# words (and any anchor right after them), plus 8 characters for "KEY-----".
_PEM_LOCATE = re.compile(r"(?:-----BEGIN (?:[A-Z0-9]++ )*+)++")
_PEM_PRIVATE = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")

# api_key: this service's own keys. Located: a token run holding "eps_".
_OWN_KEY_LOCATE = re.compile(rf"(?<![{_B64URL}])(?>[{_B64URL}]*?eps_)[{_B64URL}]*+")
_OWN_KEY = re.compile(rf"eps_[{_B64URL}]{{43}}(?![{_B64URL}])")

# jwt: header and payload segments start with "eyJ" ('{"' in base64url). Located: a run of
# tokens and dots holding ".eyJ". The header is read from its first "eyJ" (atomic: a later one
# has fewer characters after it), every segment once.
_JWT_LOCATE = re.compile(rf"(?<![{_B64URL}.])(?>[{_B64URL}.]*?\.eyJ)[{_B64URL}.]*+")
_JWT = re.compile(rf"(?<![{_B64URL}])(?>[{_B64URL}]*?eyJ)[{_B64URL}]{{5,}}+\.eyJ[{_B64URL}]{{5,}}+\.")

# bearer_token: the word and its whitespace (and any such right after), then 8 token characters.
_BEARER_LOCATE = re.compile(r"(?i)(?:\bbearer\s++)++")
_BEARER = re.compile(r"(?i)\bbearer\s++[A-Za-z0-9._~+/-]{8}")

# cloud_credential: a final repeat matches only the shortest length that counts ({16}, not
# {16,}): a longer key holds a match just as well. Located: a run of key characters holding a
# prefix; every shape lies inside such a run.
_CLOUD_KEYS = re.compile(
    r"(?:A(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA)[0-9A-Z]{16})"  # AWS access key ids
    r"|(?:AIza[0-9A-Za-z_-]{35})"  # Google API keys
    r"|(?:gh[pousr]_[A-Za-z0-9]{36})"  # GitHub tokens
    r"|(?:github_pat_[A-Za-z0-9_]{22})"
    r"|(?:glpat-[A-Za-z0-9_-]{20})"  # GitLab
    r"|(?:xox[abposr]-[A-Za-z0-9-]{10})"  # Slack
    r"|(?:(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16})"  # payment provider secret keys
    r"|(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20})"  # AI provider keys
    r"|(?:npm_[A-Za-z0-9]{36})"
    r"|(?:SG\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16})"  # mail provider keys
    r"|(?:AccountKey=[A-Za-z0-9+/=]{40})"  # Azure storage connection strings
)
_CLOUD_PREFIXES = (
    r"A(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|Iza|ccountKey=)|gh[pousr]_|github_pat_|glpat-|xox[abposr]-"
    r"|(?:sk|rk|pk)_(?:live|test)_|sk-|npm_|SG\."
)
# Whether there is any prefix at all: a first character from a short set, then the rest.
_CLOUD_ANY = re.compile(
    r"[AgxsrpnS](?:(?<=A)(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|Iza|ccountKey=)|(?<=g)(?:h[pousr]_|ithub_pat_|lpat-)"
    r"|(?<=x)ox[abposr]-|(?<=[srp])k_(?:live|test)_|(?<=s)k-|(?<=n)pm_|(?<=S)G\.)"
)
_KEY_CHARS = r"A-Za-z0-9_+/=.\-"
_CLOUD_LOCATE = re.compile(rf"(?<![{_KEY_CHARS}])(?>[{_KEY_CHARS}]*?(?:{_CLOUD_PREFIXES}))[{_KEY_CHARS}]*+")

# email: an "@" after a local-part character, then a domain with a dot followed by two letters;
# letters include non-ASCII ones (internationalised domains). Located: from such an "@", the run
# of local, domain and "@" characters. A domain never holds "@", so each is read once.
_EMAIL_LOCATE = re.compile(r"(?<=[\w.%+-])@[\w.%+@-]*+")
_EMAIL = re.compile(r"(?<=[\w.%+-])@[\w-]+(?:\.[\w-]+)*?\.[^\W\d_]{2}")

# card_number: digit groups joined by one ".", "_" or "-", or by one to three spaces. Located: a
# sequence, only from a digit followed by 12 digits or separators (no shorter one holds 13
# digits); the look-ahead is bounded and a sequence is consumed once.
_DIGIT_SEQUENCE = re.compile(r"[0-9](?=[0-9 ._-]{12})[0-9]*+(?:(?:[._-]| {1,3}+)[0-9]++)*+")
_SEPARATORS = re.compile(r"[ ._-]+")
_DROP_SEPARATORS = str.maketrans("", "", " ._-")
_CARD_MIN, _CARD_MAX = 13, 19
_DIGIT_VALUE = bytes.maketrans(b"0123456789", bytes(range(10)))
_LUHN_DOUBLE = bytes.maketrans(b"0123456789", bytes((0, 2, 4, 6, 8, 1, 3, 5, 7, 9)))
_MOD_10 = (10).__rmod__

# phone_number: "+" or "00", a country code, then 6 to 14 more digits with up to two separators
# between digits. A "00" number needs a separator after its country code, so that zero-padded
# numbers such as run-00123456 stay ordinary. Located: from such a start, the run of digits,
# separators and "+", plus the character after it (the final look-ahead).
_PHONE_START = r"(?<![\w+])\+[1-9]|(?<![\w+./-])00[1-9]"
_PHONE_LOCATE = re.compile(rf"(?:{_PHONE_START})[0-9 .()+-]*+")
_PHONE = re.compile(
    r"(?<![\w+])\+[1-9](?:[ .()-]{0,2}[0-9]){6,14}(?![0-9])"
    r"|(?<![\w+./-])00(?=[1-9][0-9]{0,3}[ .()-])[1-9](?:[ .()-]{0,2}[0-9]){6,14}(?![0-9])"
)


def normalise(text: str) -> str:
    """NFKC, without format characters (zero-width and the like), Unicode digits as ASCII.

    Compatibility forms (full-width plus, at sign and digits, a no-break space) become their
    plain forms; a zero-width space or soft hyphen inside a value no longer splits it. ASCII
    text, the common case, is returned as it is.
    """
    if text.isascii():
        return text
    out = []
    for char in unicodedata.normalize("NFKC", text):
        if char < "\x80":
            out.append(char)
            continue
        category = unicodedata.category(char)
        if category == "Cf":
            continue
        out.append(chr(48 + unicodedata.decimal(char)) if category == "Nd" else char)
    return "".join(out)


def _card(text: str, start: int, end: int) -> bool:
    """A Luhn-valid number of 13-19 digits made of whole groups of the digit sequence.

    Group-aligned spans find a card inside a longer separated run ("1 4111 1111 1111 1111")
    without reading every 13-19 digit stretch of a long unseparated number (an id) as one.
    With prefix sums a span's Luhn sum is a difference; sliding over the span ends, the starts
    13 to 19 digits back are counted by residue, so each group is added, removed and checked
    once: linear in the window.
    """
    window = text[start:end]
    digits = window.translate(_DROP_SEPARATORS).encode("ascii")
    if len(digits) < _CARD_MIN:
        return False
    lengths = list(map(len, _SEPARATORS.split(window)))
    if len(lengths) == 1:
        return len(digits) <= _CARD_MAX and _luhn_ok(digits.decode("ascii"))
    plain, doubled = digits.translate(_DIGIT_VALUE), digits.translate(_LUHN_DOUBLE)
    # even/odd: the Luhn values of the digits with those at even/odd positions doubled.
    even, odd = bytearray(plain), bytearray(plain)
    even[0::2], odd[1::2] = doubled[0::2], doubled[1::2]
    even_sums = list(map(_MOD_10, accumulate(even, initial=0)))
    odd_sums = list(map(_MOD_10, accumulate(odd, initial=0)))
    bounds = list(accumulate(lengths, initial=0))
    even_counts, odd_counts = [0] * 10, [0] * 10  # residues of the starts 13-19 digits back
    added = removed = 0
    for stop in bounds[1:]:
        while bounds[added] <= stop - _CARD_MIN:
            begin = bounds[added]
            even_counts[even_sums[begin]] += 1
            odd_counts[odd_sums[begin]] += 1
            added += 1
        while removed < added and bounds[removed] < stop - _CARD_MAX:
            begin = bounds[removed]
            even_counts[even_sums[begin]] -= 1
            odd_counts[odd_sums[begin]] -= 1
            removed += 1
        # The last digit is never doubled, the ones at the other parity are.
        if odd_counts[odd_sums[stop]] if stop % 2 else even_counts[even_sums[stop]]:
            return True
    return False


def _luhn_ok(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _searches(pattern: re.Pattern[str]) -> Callable[[str, int, int], bool]:
    return lambda text, start, end: pattern.search(text, start, end) is not None


@dataclass(frozen=True)
class _Check:
    kind: str
    worth_locating: Callable[[str], bool]  # cheap: could the text hold the shape at all
    locate: re.Pattern[str]
    tail: int  # characters after a located match that the shape may still need
    confirm: Callable[[str, int, int], bool]


_CHECKS = (
    _Check("private_key", lambda t: "-----BEGIN " in t, _PEM_LOCATE, 8, _searches(_PEM_PRIVATE)),
    _Check("api_key", lambda t: "eps_" in t, _OWN_KEY_LOCATE, 0, _searches(_OWN_KEY)),
    _Check("jwt", lambda t: ".eyJ" in t, _JWT_LOCATE, 0, _searches(_JWT)),
    _Check("bearer_token", lambda t: "bearer" in t.lower(), _BEARER_LOCATE, 8, _searches(_BEARER)),
    _Check("cloud_credential", lambda t: _CLOUD_ANY.search(t) is not None, _CLOUD_LOCATE, 0, _searches(_CLOUD_KEYS)),
    _Check("email", lambda t: "@" in t, _EMAIL_LOCATE, 0, _searches(_EMAIL)),
    _Check("card_number", lambda t: len(t) >= _CARD_MIN, _DIGIT_SEQUENCE, 0, _card),
    _Check("phone_number", lambda t: "+" in t or "00" in t, _PHONE_LOCATE, 1, _searches(_PHONE)),
)
_CONFIRM = {check.kind: check.confirm for check in _CHECKS}
assert tuple(_CONFIRM) == KINDS


def candidates(text: str) -> Iterator[Candidate]:
    """The windows the checks examine in the normalised ``text``, kind by kind in ``KINDS`` order."""
    n = len(text)
    for check in _CHECKS:
        if check.worth_locating(text):
            for match in check.locate.finditer(text):
                yield check.kind, match.start(), min(n, match.end() + check.tail)


def confirm(kind: str, text: str, start: int, end: int) -> bool:
    """Whether the candidate window ``text[start:end]`` of ``kind`` holds that shape. Reads no
    character at or after ``end``, and before ``start`` only one (a pattern's look-behind)."""
    return _CONFIRM[kind](text, start, end)


def find_forbidden(text: str) -> str | None:
    """The kind of the first forbidden shape found in ``text``, or None."""
    text = normalise(text)
    for kind, start, end in candidates(text):
        if _CONFIRM[kind](text, start, end):
            return kind
    return None
