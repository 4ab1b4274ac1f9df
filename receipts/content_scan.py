"""Format scan for forbidden content in client strings (spec 1.4-1.5, contract 2).

The scan looks for shapes of personal data and credentials. It is not exhaustive: a value
that passes is not thereby allowed by the terms. A match names the field and the kind of
match; the value itself is never echoed.
"""

from __future__ import annotations

import re

_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_CARD_CANDIDATE = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")
_PHONE = re.compile(r"(?<![\w+])\+[1-9](?:[ .()-]{0,2}[0-9]){6,14}(?![0-9])")
_PEM_PRIVATE = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*")
_OWN_KEY = re.compile(r"eps_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")
_CLOUD_KEYS = re.compile(
    r"(?:A(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA)[0-9A-Z]{16})"  # AWS access key ids
    r"|(?:AIza[0-9A-Za-z_-]{35})"  # Google API keys
    r"|(?:gh[pousr]_[A-Za-z0-9]{36,})"  # GitHub tokens
    r"|(?:github_pat_[A-Za-z0-9_]{22,})"
    r"|(?:glpat-[A-Za-z0-9_-]{20,})"  # GitLab
    r"|(?:xox[abposr]-[A-Za-z0-9-]{10,})"  # Slack
    r"|(?:(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,})"  # payment provider secret keys
    r"|(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,})"  # AI provider keys
    r"|(?:npm_[A-Za-z0-9]{36})"
    r"|(?:SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})"  # mail provider keys
    r"|(?:AccountKey=[A-Za-z0-9+/=]{40,})"  # Azure storage connection strings
)


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


def _has_card_number(text: str) -> bool:
    for match in _CARD_CANDIDATE.finditer(text):
        digits = re.sub(r"[ -]", "", match.group())
        if 13 <= len(digits) <= 19 and _luhn_ok(digits):
            return True
    return False


_CHECKS: tuple[tuple[str, object], ...] = (
    ("private_key", _PEM_PRIVATE),
    ("api_key", _OWN_KEY),
    ("jwt", _JWT),
    ("bearer_token", _BEARER),
    ("cloud_credential", _CLOUD_KEYS),
    ("email", _EMAIL),
    ("card_number", _has_card_number),
    ("phone_number", _PHONE),
)


def find_forbidden(text: str) -> str | None:
    """The kind of the first forbidden shape found in ``text``, or None."""
    for kind, check in _CHECKS:
        if isinstance(check, re.Pattern):
            if check.search(text):
                return kind
        elif callable(check) and check(text):
            return kind
    return None
