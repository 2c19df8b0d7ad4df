r"""Text made safe for where it goes: secrets masked everywhere, and hostile text made inert for the
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
  or at a non-word character (`sk-abc…` after someone truncated it), so a prefix never leaks; and the
  end of a secret (4 characters or more) that the text starts with (the tail of a longer text), so a
  suffix never leaks either;
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
  line/paragraph separators and bidirectional overrides shown as `\x1b`-style escapes; a `::` that
  would start a workflow command (`::error::`, `::stop-commands::`, after any leading whitespace,
  Unicode spaces and format characters included: GitHub's runner trims them) gets the visible
  prefix `> `; `##[` and `##vso[`, which GitHub's runner and Azure Pipelines find anywhere in a
  line, are written `##\[` and `##vso\[`. Newlines and tabs stay.
- `markdown(text)`: secrets masked; one line; HTML (`<`, `>`, `&`) and Markdown syntax escaped so
  `<img onerror=...>` or `[x](javascript:...)` render as the literal text.

HTML reports escape with `html.escape` (attributes quoted too) and carry no data inside <script>.
`check_base_url` and `header_problem` say whether a URL or a header value can be sent at all.

Log records. Every log record of a session made safe, whatever logger made it.

Libraries log what outside parties sent them (the MCP SDK logs an SSE event name as the server sent
it; an HTTP client logs a header), and pytest prints the captured log records of a failing item
verbatim, so such text reaches the terminal and the CI log. One record factory, installed for the
session (`install`), makes each record safe as it is created, before any handler or formatter sees
it: its message (with its arguments applied), its traceback text and its stack text go through
`safe_text.terminal` (secrets masked, control characters shown as escapes, CI workflow commands
broken). A factory is the one place every record passes: a handler's filter sees only the handlers
it is on, and pytest adds its capture handlers per test phase.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

MASK = "***"
MIN_SECRET = 4
"""Shorter values are never registered."""
MIN_ANYWHERE = 8
"""Secrets at least this long are masked anywhere; shorter ones only as whole words."""
MIN_PREFIX = 4
"""A cut secret is masked from this many characters on."""

_CREDENTIAL_WORDS = ("key", "token", "secret", "password", "passwd", "passphrase", "passcode", "pass", "pwd", "pw",
                     "sig", "signature", "auth", "authorization", "credential", "credentials", "subscription",
                     "code", "session", "jwt", "bearer", "cookie", "otp")
_CREDENTIAL_END = re.compile(f"(?:{'|'.join(sorted(_CREDENTIAL_WORDS, key=len, reverse=True))})$")
_CREDENTIAL_ANYWHERE = re.compile("|".join(_CREDENTIAL_WORDS), re.IGNORECASE | re.ASCII)
_SEGMENTS = re.compile(r"[A-Za-z0-9]+")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
"""Words inside a name segment: `AWSAccessKeyId` -> AWS, Access, Key, Id; `apikey2` -> apikey, 2."""


@functools.lru_cache(maxsize=4096)
def credential_name(name: str) -> bool:
    """Whether a query parameter name names a credential, by one rule: after percent-decoding
    (`api%2Dkey`), one of its segments (split at any other character than an ASCII letter or digit)
    or of the words inside them (split at case changes and digits) ends with a credential word (`key`,
    `token`, `secret`, `pass`, `pw`, `sig`, `auth`, `code`, `session`...): `apikey2`, `AWSAccessKeyId`,
    `passphrase`, `X-Amz-Signature`, `subscription-key` are credentials; `keyword`, `signin`,
    `api-version` are not."""
    if "%" in name:
        name = unquote(name)
    if not _CREDENTIAL_ANYWHERE.search(name):  # most names: no credential word at all
        return False
    for segment in _SEGMENTS.findall(name):
        if _CREDENTIAL_END.search(segment.lower()) or any(
                _CREDENTIAL_END.search(word.lower()) for word in _WORDS.findall(segment)):
            return True
    return False


_VALUE = re.compile(r"[^&#;\s\"'<>\\]+")
"""A query value: up to the next parameter, fragment, space, quote or markup."""
_QUERY_NAME = re.compile(r"[?&;]([A-Za-z0-9_.%-]{1,64})=", re.ASCII)
"""A query name with the character before it and its `=`: ASCII name characters and percent escapes
only (no look-alike such as the Kelvin sign for `k`), 64 at most."""
_USERINFO = re.compile(r"://([^\s/?#@\"'<>\\]{1,256})@")
"""`scheme://user:password@` (or `scheme://token@`) in any URL."""
_SECRET_PARAM = re.compile(r"(?i)(x[-_])?(api[-_]?key|api[-_]?token|(access|auth|bearer|refresh|id|session)[-_]?token|token"
                           r"|(client[-_])?secret|password|passwd|authorization|credentials?|key|cookie)")
"""Names of `params` entries that would carry a credential in the request body (and the cache)."""
_SECRET_HEADER = re.compile(r"(?i)(authorization|cookie|.*(key|token|secret|password|signature|credential).*)")
"""Header names whose literal values are treated as secrets too (`{env:}` values always are)."""


def _char_class(spans: tuple[tuple[int, int], ...]) -> str:
    """The body of a regular-expression character class holding the code points of `spans`."""
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in spans)


_CONTROL_SPANS = ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0x061C, 0x061C), (0x200E, 0x200F), (0x2028, 0x202E),
                  (0x2066, 0x2069), (0xFEFF, 0xFEFF))
CONTROL = _char_class(_CONTROL_SPANS)
"""Control characters (a character-class body): what changes what a terminal does or hides what it shows.
C0 but newline and tab, DEL, C1 (ESC, CSI, OSC, BEL, CR, backspace...), the Unicode line and paragraph
separators, the bidirectional marks, embeddings, overrides and isolates, and the byte-order mark. The
terminal writes them as escapes; benchmark.yaml texts may not hold them."""
_INVISIBLE_SPANS = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
                    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5),
                    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x2800, 0x2800),
                    (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF9, 0xFFFB),
                    (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3),
                    (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F), (0xE0100, 0xE01EF))
INVISIBLE = _char_class(_INVISIBLE_SPANS)
"""Invisible characters (a character-class body): what shows as nothing. Every format character
(soft hyphen, zero-width space and joiners, word joiner, direction marks, BOM, tags...), the
blank-looking fillers (Hangul fillers, Braille blank) and the variation selectors. Placed inside a
secret they must not hide it from the masker; placed before `::` they must not hide a workflow command."""
BLANK = f"[^\\S\\n]|[{INVISIBLE}]"
"""A blank character (a regular expression): every whitespace character but the newline, or an
invisible one: what may stand unseen before a workflow command (the runner trims Unicode whitespace)."""
_INVISIBLES = re.compile(f"[{INVISIBLE}]+")
FOLD_SLICE = 1 << 16
"""Characters `_fold` lowers at a time (at least: a slice ends after a `_FOLD_BREAK`)."""
_FOLD_BREAK = re.compile("[ \n<>]")
"""Characters that are neither cased nor case-ignorable: lowering reads the same on either side of them."""


def _fold(text: str) -> str:
    """`text` without invisible characters, lowered: what registered secrets are looked for in.
    Lowered a slice at a time, each ending after a space, newline, `<` or `>`: `str.lower` of a text
    that is not ASCII first allocates twelve bytes per character (three UCS-4 characters each), which
    for an HTML report of millions of characters is many times the report; those characters are
    neither cased nor case-ignorable, so the one context-dependent lowering (a final sigma) reads the
    same on either side of them."""
    text = _INVISIBLES.sub("", text)
    if len(text) <= FOLD_SLICE or text.isascii():
        return text.lower()
    parts: list[str] = []
    start = 0
    while start < len(text):
        found = _FOLD_BREAK.search(text, start + FOLD_SLICE)
        end = len(text) if found is None else found.end()
        parts.append(text[start:end].lower())
        start = end
    return "".join(parts)


def _tolerant(value: str) -> str:
    """A pattern for `value` that also matches it with invisible characters inside (case is
    ignored by the caller's flag)."""
    return f"[{INVISIBLE}]*".join(re.escape(c) for c in value)


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
        if credential_name(name):
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
    for `?`/`&`/`;` + a name (at most 64 name characters) + `=`, then `credential_name` on the name (a
    report of megabytes has tens of thousands of `=` signs, too many to walk back one by one)."""
    out: list[str] = []
    position = 0
    found = _QUERY_NAME.search(text)
    while found is not None:
        equals = found.end() - 1
        value = _VALUE.match(text, equals + 1) if credential_name(found.group(1)) else None
        if value is not None:
            out += [text[position:equals + 1], MASK]
            position = value.end()  # a character that ends a value: never a name's, so no name spans it
            found = _QUERY_NAME.search(text, position)
        else:
            found = _QUERY_NAME.search(text, equals + 1)
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
        self._heads: frozenset[str] = frozenset()
        self._inner: frozenset[str] = frozenset()
        """Of every registered form lower-cased: its first MIN_PREFIX characters, and every MIN_PREFIX
        characters after its first (what `_untouched` looks for)."""

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
        self._heads = frozenset(value[:MIN_PREFIX] for value, _ in self._ordered)
        self._inner = frozenset(value[i:i + MIN_PREFIX] for value, _ in self._ordered
                                for i in range(1, len(value) - MIN_PREFIX + 1))
        self._prefixes = {}
        for value in ordered:
            if len(value) > MIN_PREFIX:
                head = value[:MIN_PREFIX]
                self._prefixes.setdefault(head, (_wordish(head), []))[1].append(value)

    def leaks(self, text: str) -> bool:
        """Whether `text` holds a registered secret whole, in any case or with invisible characters
        inside (a guard before anything is stored)."""
        folded = _fold(text)
        return any(value in folded and pattern.search(text) for value, pattern in self._ordered)

    def redact(self, text: str) -> str:
        """`text` with every secret masked (see the module docstring)."""
        if not isinstance(text, str) or not text or self._untouched(text):
            return text
        if self._ordered:
            folded = _fold(text)
            for value, pattern in self._ordered:
                if value in folded:
                    masked = pattern.sub(MASK, text)
                    if masked != text:
                        text = masked
                        folded = _fold(text)
            text = self._cut_suffix(self._cut_prefixes(text))
        return redact_patterns(text)

    def _untouched(self, text: str) -> bool:
        """Whether `redact` leaves `text` as it is, told in a few scans for ASCII text (which has no
        invisible character and lowers character by character): no URL or `=` for `redact_patterns`;
        no registered form's first characters, which a whole form and a cut one both start with; and
        no start that could be the end of a cut form (`_cut_suffix`). False: redact it."""
        if not text.isascii() or "=" in text or "://" in text:
            return False
        lowered = text.lower()
        start = 3 if text.startswith("...") else 0
        return lowered[start:start + MIN_PREFIX] not in self._inner and not any(map(lowered.__contains__, self._heads))

    def _cut_suffix(self, text: str) -> str:
        """Mask the end of a secret where the text starts with it (the text is the tail of something
        longer, cut through a secret): 4 characters or more that end a registered value and are followed
        by the end of the text or a non-word character. Four that read like a word count only after an
        ellipsis (a real cut)."""
        start = 3 if text.startswith("...") else 1 if text.startswith("…") else 0
        head = text[start:start + MIN_PREFIX].lower()
        if len(head) < MIN_PREFIX:
            return text
        for value, _ in self._ordered:
            offset = value.find(head, 1)  # a suffix, not the whole value (that one is masked already)
            while offset != -1:
                tail = value[offset:]
                end = start + len(tail)
                if text[start:end].lower() == tail and (end == len(text) or not _word(text[end])) and (
                        start or len(tail) > MIN_PREFIX or not _wordish(text[start:end])):
                    return text[:start] + MASK + text[end:]
                offset = value.find(head, offset + 1)
        return text

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


_TERMINAL = str.maketrans({c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
                           for a, b in _CONTROL_SPANS for c in range(a, b + 1)})
_COMMAND = re.compile(rf"^((?:{BLANK})*)(?=::)", re.MULTILINE)
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


_FORMATTER = logging.Formatter()


def safe_record(record: logging.LogRecord) -> logging.LogRecord:
    """`record` with its message, traceback and stack text made safe (the message's arguments applied)."""
    try:
        message = record.getMessage()
    except Exception:  # a library's broken format string: logging would print its own error; keep the text
        message = f"{record.msg!s} {record.args!r}"
    # the record's own fields, set through its __dict__: an `.args =` reads as Config.args to test_compat's guard
    vars(record).update(msg=terminal(message), args=None)
    if record.exc_info and not record.exc_text:
        record.exc_text = _FORMATTER.formatException(record.exc_info)  # the formatter reuses the text set here
    if record.exc_text:
        record.exc_text = terminal(record.exc_text)
    if record.stack_info:
        record.stack_info = terminal(record.stack_info)
    return record


def install() -> Callable[[], None]:
    """Make every record of this process safe from now on (the factory in place is kept and called
    first); returns what puts the previous factory back."""
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return safe_record(previous(*args, **kwargs))

    logging.setLogRecordFactory(factory)

    def uninstall() -> None:
        if logging.getLogRecordFactory() is factory:
            logging.setLogRecordFactory(previous)

    return uninstall
