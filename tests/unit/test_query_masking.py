"""Credential-like query values are masked in any text (`redact_patterns`): the one-scan search masks
exactly what walking each `=` back over its name masked (the name from a `?`/`&`/`;`, ASCII name
characters and percent escapes only, 64 at most, a credential by `credential_name`; the value up to the
next parameter, fragment, space, quote or markup)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_evalbench.base.safe_text import MASK, credential_name, redact_patterns

_NAME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-%")
_VALUE = re.compile(r"[^&#;\s\"'<>\\]+")


def walked(text: str) -> str:
    """The masking as specified: every `=` walked back over its name."""
    out, position, equals = [], 0, text.find("=")
    while equals != -1:
        start = equals
        while start > 0 and equals - start < 64 and text[start - 1] in _NAME:
            start -= 1
        value = _VALUE.match(text, equals + 1)
        if (value is not None and 0 < start < equals and text[start - 1] in "?&;"
                and credential_name(text[start:equals])):
            out += [text[position:equals + 1], MASK]
            position = value.end()
            equals = text.find("=", position)
        else:
            equals = text.find("=", equals + 1)
    return "".join([*out, text[position:]])


PIECES = st.sampled_from(["?", "&", ";", "=", "#", " ", '"', "<", "key", "KEY", "api_key", "x-token", "sig", "code",
                          "auth", "a", "Z9", ".-_", "\u212aey", "\u017fig", "tok", "en", "a" * 57, "b" * 58, "api_key", "&amp;",
                          "https://h/p", "v1", "\\", "é", "%2D", "%", "pw", "Key", "Id", "2"])


@settings(max_examples=500, deadline=None)
@given(st.lists(PIECES, max_size=24).map("".join))
def test_masks_what_walking_each_equals_sign_masks(text: str) -> None:
    assert redact_patterns(text) == walked(text)


def test_credential_values_masked_names_and_other_values_kept() -> None:
    assert redact_patterns("https://h/p?a=1&api_key=s3cr=et&x=2") == f"https://h/p?a=1&api_key={MASK}&x=2"
    assert redact_patterns(";SIG=abc#frag") == f";SIG={MASK}#frag"
    assert redact_patterns("?\u212aey=v&\u017fig=w") == "?\u212aey=v&\u017fig=w"  # non-ASCII look-alikes: not names
    assert redact_patterns("?" + "a" * 57 + "api_key=v") == f"?{'a' * 57}api_key={MASK}"  # 64 name characters
    assert redact_patterns("?" + "a" * 58 + "api_key=v") == "?" + "a" * 58 + "api_key=v"  # 65: not a query name
    assert redact_patterns('<a href="x?token=">') == '<a href="x?token=">'  # no value
