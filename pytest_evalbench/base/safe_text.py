"""Text made safe for where it goes: secrets masked everywhere, and hostile text made inert for the
surface that shows it.

Secrets. The run's secrets are the API keys (`api_key_env`, OPENAI_API_KEY), `{env: NAME}` header values,
the values of credential-named headers, and URL credentials (user:password@ and token-like query
parameters of `base_url`, `--evalbench-base-url` and OPENAI_BASE_URL). They are registered where the
endpoints are resolved (`kinds.run.resolve_endpoint`), which every process of a run does from the same
benchmark.yaml and environment, so xdist workers know exactly the controller's secrets.
`redact(text)` masks, in this order:

- every registered secret (and its JSON-, HTML- and URL-encoded forms, and the Basic-auth form of URL
  credentials) wherever it occurs; values shorter than 8 characters only as whole words, so a short
  header value does not mask pieces of ordinary words;
- a *cut* secret: a word that starts like a secret (4 characters or more) and ends where the text ends
  or at a non-word character (`sk-abc…` after someone truncated it), so a prefix never leaks;
- credentials in any URL of the text (`scheme://user:pass@` and the values of credential-like query
  parameters: `?token=`, `&subscription-key=`, `&X-Amz-Signature=`...), known or not.

A registered secret is found in any case (a host name in a message is lower-cased) and with
invisible characters inside it (U+200D, U+00AD, U+200B, U+FEFF...).

Callers redact before they truncate (`cut`), so a cut can only ever go through the mask. Values shorter
than 4 characters are not registered: they would mask ordinary words and guard nothing.

Surfaces. Text from models, apps and endpoints reaches a terminal, a CI log that GitHub Actions (or Azure
Pipelines) scans for commands, and a Markdown job summary. Each surface gets one call where that text
enters it:

- `terminal(text)`: secrets masked; control characters (ESC, OSC, BEL, CR, backspace, C1, DEL), Unicode
  line/paragraph separators and bidirectional overrides shown as `\\x1b`-style escapes; a `::` that
  would start a workflow command (`::error::`, `::stop-commands::`, after any leading whitespace,
  Unicode spaces and format characters included: GitHub's runner trims them) gets the visible
  prefix `> `; `##[` and `##vso[`, which GitHub's runner and Azure Pipelines find anywhere in a
  line, are written `##\\[` and `##vso\\[`. Newlines and tabs stay.
- `markdown(text)`: secrets masked; one line; HTML (`<`, `>`, `&`) and Markdown syntax escaped so
  `<img onerror=...>` or `[x](javascript:...)` render as the literal text.

HTML reports escape with `html.escape` (attributes quoted too) and carry no data inside <script>.
`check_base_url` and `header_problem` say whether a URL or a header value can be sent at all.
"""

from __future__ import annotations

import base64
import html
import json
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

MASK = "***"
MIN_SECRET = 4
"""Shorter values are never registered."""
MIN_ANYWHERE = 8
"""Secrets at least this long are masked anywhere; shorter ones only as whole words."""
MIN_PREFIX = 4
"""A cut secret is masked from this many characters on."""

_CREDENTIAL_WORDS = (r"(?:key|token|secret|password|passwd|pwd|sig|signature|auth|authorization|credentials?"
                     r"|subscription|code|session|jwt|bearer)")
_TOKEN_PARAM = rf"(?:[a-z0-9_.-]*?{_CREDENTIAL_WORDS}(?:[-_.][a-z0-9_.-]*)?)"
"""A credential-like query name: it ends with a credential word (`key`, `api-key`, `apikey`,
`subscription-key`, `access_key`, `X-Amz-Signature`, `sig`...) or has one before a separator
(`token_v2`); always matched whole and case-insensitively."""
_TOKEN_NAME = re.compile(_TOKEN_PARAM, re.IGNORECASE | re.ASCII)
_VALUE = re.compile(r"[^&#;\s\"'<>\\]+")
"""A query value: up to the next parameter, fragment, space, quote or markup."""
_TOKEN_AT = re.compile(r"[?&;](?=[A-Za-z0-9_.-]{1,64}=)" + _TOKEN_PARAM + "=", re.IGNORECASE | re.ASCII)
"""A credential-like query name with the character before it and its `=`: the whole name (from the
`?`/`&`/`;`) is ASCII name characters (ASCII case folding: no Kelvin sign for `k`), 64 at most."""
_USERINFO = re.compile(r"://([^\s/?#@\"'<>\\]{1,256})@")
"""`scheme://user:password@` (or `scheme://token@`) in any URL."""
_SECRET_PARAM = re.compile(r"(?i)(x[-_])?(api[-_]?key|api[-_]?token|(access|auth|bearer|refresh|id|session)[-_]?token|token"
                           r"|(client[-_])?secret|password|passwd|authorization|credentials?|key|cookie)")
"""Names of `params` entries that would carry a credential in the request body (and the cache)."""
_SECRET_HEADER = re.compile(r"(?i)(authorization|cookie|.*(key|token|secret|password|signature|credential).*)")
"""Header names whose literal values are treated as secrets too (`{env:}` values always are)."""


_INVISIBLE = ("\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
              "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0")
"""Characters that show as nothing (soft hyphen, zero-width space and joiners, word joiner, BOM,
direction marks, variation selectors, fillers): placed inside a secret they must not hide it."""
_INVISIBLES = re.compile(f"[{_INVISIBLE}]+")


def _tolerant(value: str) -> str:
    """A pattern for `value` that also matches it with invisible characters inside (case is
    ignored by the caller's flag)."""
    return f"[{_INVISIBLE}]*".join(re.escape(c) for c in value)


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _wordish(text: str) -> bool:
    """Letters in one case pattern (`user`, `USER`, `User`): could be an ordinary word."""
    return text.isalpha() and (text.islower() or text.isupper() or text.istitle())


_ESCAPES = ("\\n", "\\t", "\\r")
"""JSON escapes a secret may follow (`...\\nsk-...`) in JSON text."""


def secret_params(params: Mapping[str, Any], path: str = "") -> list[str]:
    """Dotted paths of entries of a role's `params` (at any depth) named like a credential."""
    found: list[str] = []
    for name, value in params.items():
        where = f"{path}{name}"
        if isinstance(name, str) and _SECRET_PARAM.fullmatch(name):
            found.append(where)
        elif isinstance(value, Mapping):
            found += secret_params(value, where + ".")
    return found


def url_secrets(url: str) -> list[str]:
    """The credentials a URL carries: the password (and the Basic-auth base64 of `user:password`),
    the user part when it is a token (no password, or 8 characters or more), and the values of
    token-like query parameters."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
    except ValueError:
        return found
    netloc = parts.netloc
    if "@" in netloc:
        userinfo = netloc.rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        found += [password, unquote(password)]
        if not password or len(unquote(user)) >= MIN_ANYWHERE:  # a lone user part is a token; `admin` is not
            found += [user, unquote(user)]
        plain = f"{unquote(user)}:{unquote(password)}"
        found.append(base64.b64encode(plain.encode("utf-8", "surrogatepass")).decode("ascii"))
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if _TOKEN_NAME.fullmatch(name):
            found.append(value)
            found.append(quote(value, safe=""))
    return found


def strip_credentials(url: str) -> str:
    """The URL without user:password@ and with token-like query values masked: what may be
    stored (cache keys and entries) or shown."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_patterns(url)
    netloc = parts.netloc.rpartition("@")[2]
    return redact_patterns(urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)))


def redact_patterns(text: str) -> str:
    """Credentials in any URL of `text`, known to the registry or not."""
    if "://" in text:
        text = _USERINFO.sub("://" + MASK + "@", text)
    return _mask_query(text) if "=" in text else text


def _mask_query(text: str) -> str:
    """Mask the values of credential-like query parameters (`?api-key=...`, `&sig=...`): one C scan
    for `?`/`&`/`;` + a credential-like name (at most 64 name characters) + `=` (a report of
    megabytes has tens of thousands of `=` signs, too many to walk back one by one)."""
    out: list[str] = []
    position = 0
    found = _TOKEN_AT.search(text)
    while found is not None:
        equals = found.end() - 1
        value = _VALUE.match(text, equals + 1)
        if value is not None:
            out += [text[position:equals + 1], MASK]
            position = value.end()  # a character that ends a value: never a name's, so no name spans it
            found = _TOKEN_AT.search(text, position)
        else:
            found = _TOKEN_AT.search(text, equals + 1)
    if not out:
        return text
    out.append(text[position:])
    return "".join(out)


class Secrets:
    """The registry of one process's secrets (`SECRETS` is the run's; tests make their own)."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._ordered: list[tuple[str, re.Pattern[str]]] = []
        """Every registered form lower-cased, longest first, with the pattern that masks it."""
        self._prefixes: dict[str, tuple[bool, list[str]]] = {}
        """First MIN_PREFIX characters -> (whether they read like a word, the registered forms
        starting with them, longest first)."""

    def __bool__(self) -> bool:
        return bool(self._values)

    def add(self, value: str | None) -> None:
        """Register one secret value (and its encoded forms)."""
        if not value or len(value.strip()) < MIN_SECRET:
            return
        forms = {value, json.dumps(value)[1:-1], html.escape(value), quote(value, safe="")}
        with self._lock:
            if forms <= self._values:
                return
            self._values |= {f for f in forms if len(f) >= MIN_SECRET}
            self._compile()

    def add_url(self, url: str | None) -> None:
        if url:
            for value in url_secrets(url):
                self.add(value)

    def add_headers(self, headers: Mapping[str, str], env_names: Iterable[str] = ()) -> None:
        """Header values sent by a role: those named in `env_names` (read from `{env:}`) and those of
        credential-named headers (Authorization, X-Api-Key...) are secrets."""
        from_env = set(env_names)
        for name, value in headers.items():
            if name in from_env or _SECRET_HEADER.fullmatch(name):
                self.add(value)
                scheme, _, rest = value.partition(" ")
                if rest and scheme.lower() in ("bearer", "basic", "token"):
                    self.add(rest)

    def add_environment(self, env: Mapping[str, str]) -> None:
        """The run's defaults that exist whatever benchmark.yaml says: OPENAI_API_KEY, OPENAI_BASE_URL."""
        self.add(env.get("OPENAI_API_KEY"))
        self.add_url(env.get("OPENAI_BASE_URL"))

    def clear(self) -> None:
        with self._lock:
            self._values = set()
            self._compile()

    def _compile(self) -> None:
        ordered = sorted(self._values, key=len, reverse=True)
        # longest first, so `user:password` goes before `password`; `str.find` on the lower-cased text
        # without invisible characters (C speed) decides whether a value occurs at all, and only then
        # its pattern (any case, invisible characters allowed inside; short values as whole words) runs
        self._ordered = [(v.lower(), re.compile(_tolerant(v) if len(v) >= MIN_ANYWHERE
                                                else rf"(?<!\w){_tolerant(v)}(?!\w)", re.IGNORECASE))
                         for v in ordered]
        self._prefixes = {}
        for value in ordered:
            if len(value) > MIN_PREFIX:
                head = value[:MIN_PREFIX]
                self._prefixes.setdefault(head, (_wordish(head), []))[1].append(value)

    def leaks(self, text: str) -> bool:
        """Whether `text` holds a registered secret whole, in any case or with invisible characters
        inside (a guard before anything is stored)."""
        folded = _INVISIBLES.sub("", text).lower()
        return any(value in folded and pattern.search(text) for value, pattern in self._ordered)

    def redact(self, text: str) -> str:
        """`text` with every secret masked (see the module docstring)."""
        if not isinstance(text, str) or not text:
            return text
        if self._ordered:
            folded = _INVISIBLES.sub("", text).lower()
            for value, pattern in self._ordered:
                if value in folded:
                    masked = pattern.sub(MASK, text)
                    if masked != text:
                        text = masked
                        folded = _INVISIBLES.sub("", text).lower()
            text = self._cut_prefixes(text)
        return redact_patterns(text)

    def _cut_prefixes(self, text: str) -> str:
        """Mask words that start like a secret and stop where it was cut (see the module docstring).
        A prefix that reads like a word (`user`, `Pass`) counts only at a real cut: the end of the
        text or an ellipsis; others (`sk-pr`, `QZXk`, `ab12`) also before any non-word character."""
        spans: list[tuple[int, int]] = []
        size = len(text)
        for head, (wordish, group) in self._prefixes.items():
            start = text.find(head)
            while start != -1:
                if start == 0 or not _word(text[start - 1]) or text[start - 2:start] in _ESCAPES:
                    for secret in group:
                        length = MIN_PREFIX
                        limit = min(len(secret), size - start)
                        while length < limit and text[start + length] == secret[length]:
                            length += 1
                        end = start + length
                        if end == size or text.startswith(("…", "..."), end) or (
                                not _word(text[end]) and not (wordish and length == MIN_PREFIX)):
                            spans.append((start, end))
                            break
                start = text.find(head, start + 1)
        if not spans:
            return text
        spans.sort()
        out, position = [], 0
        for start, end in spans:
            if start < position:  # overlapping cuts: extend the one already masked
                position = max(position, end)
                continue
            out += [text[position:start], MASK]
            position = end
        out.append(text[position:])
        return "".join(out)

    def redact_data(self, data: Any) -> Any:
        """A JSON-like value with every string in it redacted (keys included)."""
        if isinstance(data, str):
            return self.redact(data)
        if isinstance(data, dict):
            return {self.redact(k) if isinstance(k, str) else k: self.redact_data(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self.redact_data(v) for v in data]
        return data


SECRETS = Secrets()
"""This process's secrets: registered by `kinds.run.resolve_endpoint`, read by every sink."""


def redact(text: str) -> str:
    """`text` with every secret of the run masked (call it before truncating)."""
    return SECRETS.redact(text)


def redact_data(data: Any) -> Any:
    return SECRETS.redact_data(data)


def truncated(text: str, limit: int | None, what: str, see: str = "") -> str:
    """`text` cut to `limit` characters (None or 0: kept whole) with a note the reader sees, saying what
    was cut, from how long, and (`see`) which setting bounds it."""
    if not limit or len(text) <= limit:
        return text
    return (f"{text[:limit]}\n[evalbench: {what} truncated from {len(text)} to {limit} characters"
            + (f"; see {see}]" if see else "]"))


def cut(text: str, limit: int, marker: str = "…") -> str:
    """`text` redacted, then cut to `limit` characters (the marker included): no secret prefix survives."""
    text = redact(text)
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker


_VISIBLE = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)] if c not in (0x09, 0x0A)}
_VISIBLE.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                                            0x200E, 0x200F, 0x061C, 0xFEFF)})
_TERMINAL = str.maketrans(_VISIBLE)
_BLANK = ("[^\\S\\n]|[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
          "\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u2800\u3164\ufe00-\ufe0f"
          "\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
          "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f\U000e0100-\U000e01ef]")
"""What may stand invisibly before a command: every whitespace character but the newline (the runner
trims Unicode whitespace before it looks for `::`), every format character (U+200B, U+FEFF, U+2060...)
and the blank-looking fillers and variation selectors."""
_COMMAND = re.compile(rf"^((?:{_BLANK})*)(?=::)", re.MULTILINE)
"""A line that would start a GitHub workflow command (`::error::`) after invisible characters."""
_ANYWHERE = re.compile(r"##(vso)?\[", re.IGNORECASE)
"""`##[group]` (GitHub) and `##vso[...]` (Azure Pipelines): the runners find these anywhere in a line."""
COMMAND_PREFIX = "> "
"""What a line that would start a workflow command gets in front of its `::`."""

_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*[]"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"})
"""HTML, links and images, code spans, emphasis and table cells: what could make model text act."""


def control_visible(text: str) -> str:
    """Control and direction-changing characters written as escapes (newlines and tabs kept)."""
    return text.translate(_TERMINAL)


def no_commands(text: str) -> str:
    """No line can carry a CI workflow command: `::` after any leading whitespace or invisible
    characters gets the visible prefix `> `, and `##[` / `##vso[` anywhere get a backslash before
    their `[` (`##\\[group]`), which neither runner reads as a command."""
    if "::" in text:
        text = _COMMAND.sub(lambda m: m.group(1) + COMMAND_PREFIX, text)
    if "##" in text:
        text = _ANYWHERE.sub(lambda m: m.group(0)[:-1] + "\\[", text)
    return text


def terminal(text: str) -> str:
    """Text safe to write to a terminal or a CI log (see the module docstring)."""
    return no_commands(control_visible(redact(str(text))))


def markdown(text: str) -> str:
    """Text safe inside a Markdown table cell or list item (one line, nothing rendered)."""
    return control_visible(redact(str(text))).replace("\n", " ").translate(_MARKDOWN)


def check_base_url(url: str) -> str:
    """An endpoint URL must be http(s) with a host; the usual slip is a missing scheme
    (`localhost:8000/v1`), which would otherwise fail every call with a confusing error."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise ValueError(f"{redact(strip_credentials(url))!r} has a port that is not a number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact(strip_credentials(url))!r} is not an http:// or https:// URL with a host (e.g. http://localhost:8000/v1)")
    return url


def header_problem(value: str) -> str | None:
    """Why `value` cannot go into an HTTP header (an API key pasted with its line break), or None.
    The value itself is never part of the answer: it may be a secret."""
    if "\r" in value or "\n" in value:
        return "contains a line break"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return "contains characters an HTTP header cannot carry"
    return None
