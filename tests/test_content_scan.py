"""The content scan: what it catches, what it lets through, and that
it runs in linear time in the length of what it scans."""

from __future__ import annotations

import hashlib
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execution_proof.receipts.content_scan import KINDS, candidates, confirm, find_forbidden, normalise
from execution_proof.receipts.errors import BadRequest, ForbiddenContent

# --- linear time ----------------------------------------------------------------------------

# Shapes that made the scan, or one of its patterns, super-linear, or that pack the most
# anchors per character. bench/scan.py times the same shapes (keep both in step).
ADVERSARIAL_UNITS = (
    "a.", "a@", "a@a.", "a-", "a", "1", "1 ", "1.", "1_", "1-", "12  ", "+1", "+1 ", "00 1", "001 ",
    "eyJ", "eyJa.", ".eyJ", "-----BEGIN ", "-----BEGIN A ", "bearer ", "Bearer\t", "eps_", "AKIA", "AKI",
    "AIza", "ghp_", "github_pat_", "glpat-", "xoxb-", "sk_live_", "sk-", "npm_", "SG.", "AccountKey=",
    "@", ".", " ", "\uff11", "\u0661", "a\u200b", "\ufdfa", "\uff20",
)  # fmt: skip
PER_KIND_FACTOR = 2.2
"""Bound on one kind's candidate windows' total length per character of (normalised) text.
A kind's located matches never overlap; only the short tail a window may add after its match
(8 characters for "KEY-----" or a bearer token, 1 for a phone number's look-ahead) can, and a
match is at least 7 characters long where there is a tail of 8 ("bearer "): (7 + 8) / 7 < 2.2.
With 8 kinds the scan reads each character at most 8 * 2.2 times. Measured worst: about 2.4 for
all kinds together ("bearer a@")."""


def _windows_by_kind(text: str) -> dict[str, int]:
    totals = dict.fromkeys(KINDS, 0)
    for kind, start, end in candidates(text):
        assert 0 <= start < end <= len(text)
        totals[kind] += end - start
    return totals


def _assert_linear(text: str) -> None:
    for kind, total in _windows_by_kind(text).items():
        assert total <= PER_KIND_FACTOR * len(text) + 8, kind


@given(
    units=st.lists(st.sampled_from(ADVERSARIAL_UNITS), min_size=1, max_size=4),
    length=st.integers(min_value=1, max_value=4096),
)
@settings(max_examples=300 * settings.default.max_examples // 100, deadline=None)
def test_candidate_windows_are_linear_in_the_text(units: list[str], length: int) -> None:
    """The checks examine only candidate windows, whose total length per kind is at most
    PER_KIND_FACTOR times the text's: the scan's work grows linearly with the text."""
    unit = "".join(units)
    _assert_linear(normalise((unit * (length // len(unit) + 1))[:length]))


@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS)
def test_candidate_windows_are_linear_for_each_shape_at_16_kib(unit: str) -> None:
    _assert_linear(normalise((unit * (16_384 // len(unit) + 1))[:16_384]))


PIECES = [
    "a", "e", "y", "J", "1", "0", " ", "+", "@", ".", "-", "_", "\u200b", "\uff11", "bearer ", "eyJ", "abcde", "eps_",
    "AKIA", "SG.", "ex.de", "4111", "0049 ", "-----BEGIN ", "PRIVATE KEY-----",
]  # fmt: skip


@given(text=st.lists(st.sampled_from(PIECES), max_size=100).map("".join))
@settings(max_examples=300 * settings.default.max_examples // 100, deadline=None)
def test_confirming_a_window_reads_only_the_window(text: str) -> None:
    """A check's answer depends only on its window and at most one character before it (a
    look-behind), whatever surrounds them."""
    text = normalise(text)
    for kind, start, end in candidates(text):
        answer = confirm(kind, text, start, end)
        assert confirm(kind, text[:end] + "1a.@-", start, end) == answer
        if start > 0:
            moved = "a. 1" + text[start - 1 : end] + "1a.@-"
            assert confirm(kind, moved, 5, 5 + end - start) == answer


def _best_seconds(text: str) -> float:
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        find_forbidden(text)
        best = min(best, time.perf_counter() - began)
    return best


SHAPES_BY_LENGTH = {
    **{
        f"{unit!r} repeated": (lambda n, unit=unit: (unit * n)[:n])
        for unit in ("a.", "1", "+1", "eyJ", "eps_", "SG.", "a-", "1 ")
    },
    # One long run and no match at its end: a pattern that backtracked into the run, or read it
    # again from each anchor inside it, would be quadratic here.
    "eyJ run, dot": lambda n: "eyJ" * (n // 3) + ".x",
    "eyJ run, dot, eyJ": lambda n: "x." + "eyJ" * (n // 3) + ".eyJabcdefgh",
    "PEM words": lambda n: "-----BEGIN " + "A " * (n // 2),
    "e-mail domain": lambda n: "a@" + "b." * (n // 2),
    "bearer spaces": lambda n: "bearer" + " " * n,
    "phone digits": lambda n: "+1" + " 1" * (n // 2),
    "SG key run": lambda n: "SG." + "a" * n,
    "key prefixes": lambda n: "sk-" * (n // 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES_BY_LENGTH))
def test_scan_time_grows_linearly(shape: str) -> None:
    """Wall-clock companion of the window bound, for what it cannot see (backtracking inside a
    pattern): 16 times the text must cost far less than 256 times the time (quadratic), with a
    wide margin for a busy machine (best of 5)."""
    build = SHAPES_BY_LENGTH[shape]
    assert _best_seconds(build(16_384)) < 64 * _best_seconds(build(1024))


# --- what the scan catches -------------------------------------------------------------------

FORBIDDEN = [
    ("mail me: a.b+c@sub.example.co.uk", "email"),
    ("bob@example.org", "email"),
    ("user\u200b@example.com", "email"),  # zero-width space before "@"
    ("user@exam\u00adple.com", "email"),  # soft hyphen in the domain
    ("user@ex\u00e4mple.de", "email"),  # internationalised domain
    ("\u7528\u6237@\u4f8b\u5b50.\u516c\u53f8", "email"),  # all non-ASCII
    ("\uff55\uff53\uff45\uff52\uff20\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0e\uff43\uff4f\uff4d", "email"),
    ("5500-0000-0000-0004", "card_number"),
    ("378282246310005", "card_number"),
    ("4111 1111 1111 1111", "card_number"),
    ("4111.1111.1111.1111", "card_number"),
    ("4111_1111_1111_1111", "card_number"),
    ("4111\u00a01111\u00a01111\u00a01111", "card_number"),  # no-break spaces
    ("4111\u202f1111\u20071111\u30001111", "card_number"),  # narrow, figure, ideographic spaces
    ("4111  1111   1111  1111", "card_number"),  # repeated spaces
    ("4111\u200b1111\u200b1111\u200b1111", "card_number"),  # zero-width spaces
    (
        "\uff14\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11 \uff11\uff11\uff11\uff11",
        "card_number",
    ),
    ("\u0664\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661", "card_number"),
    (
        "\u096a\u0967\u0967\u0967 \u0967\u0967\u0967\u0967 \u0967\u0967\u0967\u0967 \u0967\u0967\u0967\u0967",
        "card_number",
    ),
    ("1 4111 1111 1111 1111", "card_number"),  # inside a longer digit run
    ("4111 1111 1111 1111 9", "card_number"),
    ("id 12 34 5500 0000 0000 0004 77", "card_number"),
    ("tel +1 (415) 555-2671", "phone_number"),
    ("+44 20 7946 0958", "phone_number"),
    ("0049 30 1234567", "phone_number"),
    ("call 0044-20-7946-0958", "phone_number"),
    ("001 (415) 555-2671", "phone_number"),
    ("\uff0b49 30 1234567", "phone_number"),  # full-width plus
    ("\uff0b\uff14\uff19 \uff13\uff10 \uff11\uff12\uff13\uff14\uff15\uff16\uff17", "phone_number"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----", "private_key"),
    ("-----BEGIN PRIVATE KEY-----", "private_key"),
    ("-----BEGIN RSA PRIVATE\u200b KEY-----", "private_key"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"),
    ("token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIx.", "jwt"),
    ("authorization: bearer 0123456789abcdef", "bearer_token"),
    ("Bearer\u00a0abcdefghijklmnop", "bearer_token"),
    ("AKIAIOSFODNN7EXAMPLE", "cloud_credential"),
    ("AKIA\u200bIOSFODNN7EXAMPLE", "cloud_credential"),
    ("AIza" + "B" * 35, "cloud_credential"),
    ("ghp_" + "a" * 36, "cloud_credential"),
    ("glpat-" + "x" * 20, "cloud_credential"),
    ("xoxb-1234567890-abcdef", "cloud_credential"),
    ("sk_live_" + "a" * 24, "cloud_credential"),
    ("sk-proj-" + "a" * 20, "cloud_credential"),
    ("npm_" + "a" * 36, "cloud_credential"),
    ("SG." + "a" * 16 + "." + "b" * 16, "cloud_credential"),
    ("DefaultEndpointsProtocol=https;AccountKey=" + "A" * 40, "cloud_credential"),
    ("github_pat_" + "A" * 30, "cloud_credential"),
    ("eps_" + "A" * 43, "api_key"),
]

ORDINARY = [
    # git SHAs and refs
    "9fceb02d0ae598e95dc970b74767f19372d61af8",
    "git:9fceb02d0ae598e95dc970b74767f19372d61af8",
    "git:4f2a9c1e8b",
    "refs/heads/main",
    "HEAD@{1}",
    # semantic versions and package pins
    "1.2.3",
    "v1.2.3-rc.1+build.5678",
    "2.0.0-beta.11",
    "release 2026.11.21",
    "lodash@4.17.21",
    "actions/checkout@v4",
    "node@v20.11.1",
    "python3.11",
    # ISO dates and times
    "2026-11-23",
    "2026-11-23T10:11:12Z",
    "2026-11-23T10:11:12.123456+01:00",
    "2026-11-23 10:11:12",
    "build 2026-11-21",
    # sha256 values
    "sha256:" + "1" * 64,
    *("sha256:" + hashlib.sha256(word).hexdigest() for word in (b"receipt", b"abc", b"build", b"release-1.4.2")),
    "docker.io/library/python@sha256:" + hashlib.sha256(b"image").hexdigest(),
    # build and run numbers
    "build-20261123-1234",
    "run-000123",
    "run-00123456",
    "order 00123456789",
    "ci/job/88123",
    "#4567",
    "1234567890123",
    "4111 1111 1111 1112",  # fails Luhn
    "123456789012",  # too short for a card
    "10.0.0.1",
    # file paths
    "/var/lib/eps/receipts/2026/11/23/out.json",
    "src/receipts/content_scan.py",
    "C:\\builds\\1234\\out.bin",
    # URLs without credentials
    "https://github.com/org/repo/actions/runs/12345678901",
    "https://example.com/a/b?c=d&e=f#g",
    "https://medium.com/@alice.smith/post",
    "https://registry.npmjs.org/@types/node/-/node-20.1.0.tgz",
    # words
    "stage=deploy actor_role=ci",
    "d\u00e9ploiement \u00e9tape 2",
    "\u65e5\u672c\u8a9e\u30bf\u30b0",
    "release \U0001f680",
    "a@b",  # no domain
    "+15",
    "+123",  # too short for a phone
    "bearer",  # no token
    "eyJhbGciOiJIUzI1NiJ9",  # one segment
]


@pytest.mark.parametrize(("text", "kind"), FORBIDDEN)
def test_scan_finds_forbidden_shapes(text: str, kind: str) -> None:
    assert find_forbidden(text) == kind


@pytest.mark.parametrize("text", ORDINARY)
def test_scan_leaves_ordinary_values_alone(text: str) -> None:
    assert find_forbidden(text) is None


def test_tables_cover_every_kind() -> None:
    assert {kind for _, kind in FORBIDDEN} == set(KINDS)


@given(st.text(alphabet=st.characters(categories=["Ll", "Lu", "Nd", "Pd", "Zs", "Cf", "Po", "Sm"]), max_size=256))
def test_scan_never_raises(text: str) -> None:
    assert find_forbidden(text) in (None, *KINDS)


def test_normalise_folds_compatibility_forms_and_drops_format_characters() -> None:
    assert normalise("plain ascii") == "plain ascii"
    assert normalise("\uff0b\uff14\uff19\u00a0\u0661\u096a\u200b\u00ad\ufeff@") == "+49 14@"
    assert normalise("caf\u00e9") == "caf\u00e9"


# --- nothing the previous scan caught is let through ------------------------------------------

_OLD_CHECKS = (
    ("private_key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("api_key", re.compile(r"eps_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")),
    ("jwt", re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")),
    ("bearer_token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*")),
    ("email", re.compile(r"[A-Za-z0-9.%+_-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")),
    (
        "cloud_credential",
        re.compile(
            r"(?:A(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA)[0-9A-Z]{16})|(?:AIza[0-9A-Za-z_-]{35})|(?:gh[pousr]_[A-Za-z0-9]{36,})"
            r"|(?:github_pat_[A-Za-z0-9_]{22,})|(?:glpat-[A-Za-z0-9_-]{20,})|(?:xox[abposr]-[A-Za-z0-9-]{10,})"
            r"|(?:(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,})|(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,})"
            r"|(?:npm_[A-Za-z0-9]{36})|(?:SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})|(?:AccountKey=[A-Za-z0-9+/=]{40,})"
        ),
    ),
    ("phone_number", re.compile(r"(?<![\w+])\+[1-9](?:[ .()-]{0,2}[0-9]){6,14}(?![0-9])")),
)
_OLD_CARD = re.compile(r"(?<![0-9])[0-9](?:[ -]?[0-9]){12,18}(?![0-9])")


def _old_luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def _old_find(text: str) -> bool:
    """The scan before it was made linear (its e-mail local part limited to the characters the
    new one accepts before "@"), quadratic but fine on short texts."""
    if any(pattern.search(text) for _, pattern in _OLD_CHECKS):
        return True
    return any(_old_luhn(re.sub("[ -]", "", m.group())) for m in _OLD_CARD.finditer(text))


@given(
    st.lists(
        st.sampled_from(
            [
                "4111",
                "1111",
                "5500",
                "0000",
                "0004",
                "1",
                " ",
                "-",
                "+1",
                "+44 ",
                "(",
                ")",
                ".",
                "a",
                "@",
                "ex",
                ".de",
                "eyJ",
                "abcde",
                "bearer ",
                "eps_",
                "A" * 8,
                "-----BEGIN ",
                "PRIVATE KEY-----",
            ]
        ),
        max_size=24,
    ).map("".join)
)
@settings(max_examples=500 * settings.default.max_examples // 100, deadline=None)
def test_the_scan_catches_whatever_the_previous_scan_caught(text: str) -> None:
    if _old_find(text):
        assert find_forbidden(text) is not None


EXACT_KINDS = ("private_key", "api_key", "jwt", "bearer_token", "cloud_credential", "phone_number")
"""Kinds whose rule did not change (only how it is searched); "+" phone numbers only."""
KEY_PIECES = [
    "eps_", "A", "a", "A" * 16, "A" * 43, "a" * 8, "b" * 35, "7" * 20, "-", "_", ".", " ", "\t", "=", "/", "eyJ",
    "abcde", "bearer", "Bearer ", "AKIA", "AIza", "ghp_", "github_pat_", "glpat-", "xoxb-", "sk_live_", "sk-",
    "npm_", "SG.", "AccountKey=", "+", "1", "4", "(", ")", "-----BEGIN ", "RSA ", "PRIVATE KEY-----",
]  # fmt: skip


def _old_kind_matches(kind: str, text: str) -> bool:
    return any(pattern.search(text) for name, pattern in _OLD_CHECKS if name == kind)


@given(st.lists(st.sampled_from(KEY_PIECES), max_size=40).map("".join))
@settings(max_examples=1000 * settings.default.max_examples // 100, deadline=None)
def test_unchanged_kinds_match_exactly_what_they_matched_before(text: str) -> None:
    """Windows are neither too short (a look-ahead cut off at a window's end) nor too long."""
    for kind in EXACT_KINDS:
        found = any(confirm(k, text, start, end) for k, start, end in candidates(text) if k == kind)
        assert found == _old_kind_matches(kind, text), kind


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"code_ref": "a." * 5000 + "bob@example.org"}, None),
        ({"tags": {"k": "a." * 5000 + "bob@example.org"}}, "value_length"),
        ({"tags": {"a." * 100 + "@example.org": "v"}}, "key_length"),
    ],
)
def test_an_overlong_string_is_refused_for_its_length_before_any_scan(
    body: dict[str, object], reason: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan only ever sees strings within the length limits (256 characters, keys 64)."""
    import execution_proof.receipts.model as model

    def no_scan(text: str) -> str | None:
        raise AssertionError("scanned a string longer than its limit")

    monkeypatch.setattr(model, "find_forbidden", no_scan)
    with pytest.raises(BadRequest) as info:
        model.parse_create_request({"input_hash": "sha256:" + "0" * 64, **body})
    assert not isinstance(info.value, ForbiddenContent)
    assert (info.value.details or {}).get("reason") == reason


@given(
    st.lists(st.text(alphabet="0123456789", min_size=1, max_size=6), min_size=1, max_size=12),
    st.sampled_from([" ", ".", "_", "-", "  ", "   "]),
)
@settings(max_examples=1000 * settings.default.max_examples // 100, deadline=None)
def test_card_check_tries_every_group_aligned_span(groups: list[str], separator: str) -> None:
    """Against the plain definition: some run of whole groups has 13-19 digits and passes Luhn."""
    text = separator.join(groups)
    expected = any(
        13 <= len("".join(groups[i:j])) <= 19 and _old_luhn("".join(groups[i:j]))
        for i in range(len(groups))
        for j in range(i + 1, len(groups) + 1)
    )
    assert confirm("card_number", text, 0, len(text)) == expected
    assert (find_forbidden(text) == "card_number") == expected  # cards are checked before phones
