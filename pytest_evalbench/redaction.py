"""One redaction for the whole run: every secret it knows, masked before text is cut or shown.

The run's secrets are the API keys (`api_key_env`, OPENAI_API_KEY), `{env: NAME}` header values,
the values of credential-named headers, and URL credentials (user:password@ and token-like query
parameters of `base_url`, `--evalbench-base-url` and OPENAI_BASE_URL). They are registered where
the endpoints are resolved (`context.resolve_endpoint`), which every process of a run does from
the same benchmark.yaml and environment, so xdist workers know exactly the controller's secrets.

`redact(text)` masks, in this order:
- every registered secret (and its JSON-, HTML- and URL-encoded forms, and the Basic-auth form of
  URL credentials) wherever it occurs; values shorter than 8 characters only as whole words, so a
  short header value does not mask pieces of ordinary words;
- a *cut* secret: a word that starts like a secret (4 characters or more) and ends where the text
  ends or at a non-word character (`sk-abc…` after someone truncated it), so a prefix never leaks;
- credentials in any URL of the text (`scheme://user:pass@` and `?token=...`-style parameters),
  known or not.

Callers redact before they truncate (`cut`), so a cut can only ever go through the mask. Values
shorter than 4 characters are not registered: they would mask ordinary words and guard nothing.
This module imports nothing of the plugin (core and pytest layer both use it).
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

_TOKEN_PARAM = (r"(?:[a-z0-9_.-]*(?:api[-_]?key|token|secret|password|passwd|signature|credential)"
                r"|key|sig|auth|pwd|code)")
_QUERY = re.compile(rf"(?i)([?&;]{_TOKEN_PARAM}=)([^&#;\s\"'<>\\]+)")
"""A credential-like query parameter (`?api-key=...`, `&token=...`, `&sig=...`) in any URL."""
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#@\"'<>\\]+)@")
"""`scheme://user:password@` (or `scheme://token@`) in any URL."""
_SECRET_PARAM = re.compile(r"(?i)(x[-_])?(api[-_]?key|api[-_]?token|(access|auth|bearer|refresh|id|session)[-_]?token|token"
                           r"|(client[-_])?secret|password|passwd|authorization|credentials?|key|cookie)")
"""Names of `params` entries that would carry a credential in the request body (and the cache)."""
_SECRET_HEADER = re.compile(r"(?i)(authorization|cookie|.*(key|token|secret|password|signature|credential).*)")
"""Header names whose literal values are treated as secrets too (`{env:}` values always are)."""


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


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
    """The credentials a URL carries: user, password, `user:password` (and its Basic-auth base64),
    and the values of token-like query parameters."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
    except ValueError:
        return found
    netloc = parts.netloc
    if "@" in netloc:
        userinfo = netloc.rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        for value in (userinfo, user, password, unquote(userinfo), unquote(user), unquote(password)):
            found.append(value)
        plain = f"{unquote(user)}:{unquote(password)}"
        found.append(base64.b64encode(plain.encode("utf-8", "surrogatepass")).decode("ascii"))
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if re.fullmatch(_TOKEN_PARAM, name, re.IGNORECASE):
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
        text = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    if "=" in text:
        text = _QUERY.sub(lambda m: m.group(1) + MASK, text)
    return text


class Secrets:
    """The registry of one process's secrets (`SECRETS` is the run's; tests make their own)."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None
        self._prefixes: list[tuple[str, str]] = []
        """(first MIN_PREFIX characters, secret) of every registered form, longest secret first."""

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
        alternatives = [re.escape(v) if len(v) >= MIN_ANYWHERE else rf"(?<!\w){re.escape(v)}(?!\w)" for v in ordered]
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None
        self._prefixes = [(v[:MIN_PREFIX], v) for v in ordered if len(v) > MIN_PREFIX]

    def leaks(self, text: str) -> bool:
        """Whether `text` holds a registered secret whole (a guard before anything is stored)."""
        pattern = self._pattern
        return pattern is not None and pattern.search(text) is not None

    def redact(self, text: str) -> str:
        """`text` with every secret masked (see the module docstring)."""
        if not isinstance(text, str) or not text:
            return text
        pattern = self._pattern
        if pattern is not None:
            text = pattern.sub(MASK, text)
            text = self._cut_prefixes(text)
        return redact_patterns(text)

    def _cut_prefixes(self, text: str) -> str:
        spans: list[tuple[int, int]] = []
        for head, secret in self._prefixes:
            start = text.find(head)
            while start != -1:
                if start == 0 or not _word(text[start - 1]) or text[start - 2:start] in ("\\n", "\\t", "\\r"):
                    length = MIN_PREFIX
                    limit = min(len(secret), len(text) - start)
                    while length < limit and text[start + length] == secret[length]:
                        length += 1
                    end = start + length
                    if end == len(text) or not _word(text[end]):
                        spans.append((start, end))
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
"""This process's secrets: registered by `context.resolve_endpoint`, read by every sink."""


def redact(text: str) -> str:
    """`text` with every secret of the run masked (call it before truncating)."""
    return SECRETS.redact(text)


def redact_data(data: Any) -> Any:
    return SECRETS.redact_data(data)


def cut(text: str, limit: int, marker: str = "…") -> str:
    """`text` redacted, then cut to `limit` characters (the marker included): no secret prefix survives."""
    text = redact(text)
    return text if len(text) <= limit else text[: max(0, limit - len(marker))] + marker
