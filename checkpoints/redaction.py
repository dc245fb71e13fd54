"""One redactor for everything the project stores or shows that may carry a secret.

``Redactor`` cleans trace rows and exports: the values of credential env vars, credential-named
JSON fields, URL and header credentials and well-known key shapes. ``is_secret_name`` is the one
broad test for a setting's name (``api_key``, ``max_tokens`` alike: anything with key, token,
secret, password or credential in it), used where settings are kept (cache identity, a run's
stored sampling); ``strip_credentials`` drops ``user:password@`` and the query from a URL.
No imports from the rest of the project: every layer may use it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

REDACTED = "[redacted]"

_SECRET_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY", "_SECRET_KEY")
_MIN_SECRET_LEN = 8  # shorter env values would redact ordinary words
_SECRET_KEY_NAMES = re.compile(
    r"(?:^|_)(?:api_?key|apikey|api_token|access_token|refresh_token|auth_token|id_token|session_token"
    r"|secret|client_secret|password|passwd|authorization|proxy_authorization|cookie|set_cookie"
    r"|private_key|credentials?|x_api_key|x_goog_api_key|bearer)$"
)
# Value characters exclude quotes and backslashes, so a redaction inside JSON text keeps it valid JSON.
# Each pattern runs only when a cheap substring test says it may match (see Redactor.text).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"<>\\]+@")
_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:api[_-]?key|key|token|access[_-]?token|auth|sig|signature|secret|password|code)=)[^&;#\s'\"<>\\]+"
)
# A header value needs a scheme (Bearer ...) or a digit, so prose such as "authorization: required" stays.
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|x-goog-api-key)(\\?['\"]?\s*[:=]\s*\\?['\"]?)"
    r"(?:(?:bearer|basic|token)\s+[^\s,;'\"}\\]+|(?=[^\s,;'\"}\\]*\d)[^\s,;'\"}\\]{6,})"
)
# A credential after Bearer/Basic has a digit in it: "basic understanding" is prose.
_BEARER = re.compile(r"\b([Bb]earer|BEARER|Basic)\s+(?=[A-Za-z._~+/\-]*\d)[A-Za-z0-9._~+/\-]{12,}=*")
# Shapes of well-known provider keys, caught even when no env var holds them.
_KEY_SHAPES = re.compile(
    r"\b(?:sk-(?:proj-|ant-|or-)?[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|hf_[A-Za-z0-9]{20,}"
    r"|lsv2_(?:pt|sk)_[A-Za-z0-9_]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|xox[abprs]-[A-Za-z0-9\-]{10,})"
)
# The literal starts of the key shapes above, each searched alone: re finds a literal prefix faster than str.find
# does, and one search covers the five GitHub prefixes (an alternation of them all would be slower than either).
_KEY_SHAPE_HINTS = tuple(re.compile(hint).search for hint in ("sk-", "AIza", "hf_", "lsv2_", "gh[pousr]_", "xox"))
_AUTH_HINTS = ("authorization", "api-key")
# The end of a JSON object key and the start of a string, object or array value.
_JSON_FIELD = re.compile(r'"\s*:\s*(?=["{\[])')
_SECRET_KEY_ENDINGS = (
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "cookie",
    "credential",
    "credentials",
    "bearer",
)
_SECRET_KEY_QUOTED = tuple(f'{ending}"' for ending in _SECRET_KEY_ENDINGS)  # a key's end, as JSON text has it
_DECODER = json.JSONDecoder()


class Redactor:
    """Replaces secrets in text and JSON: env-var secrets, key-named fields, URL and header credentials, key shapes."""

    def __init__(self, secrets: Mapping[str, str] = {}) -> None:
        pairs = [(value, name) for name, value in secrets.items() if len(value) >= _MIN_SECRET_LEN]
        # As written in JSON text too (a secret with a quote or backslash in it is escaped there).
        pairs += [(json.dumps(value)[1:-1], name) for value, name in pairs if json.dumps(value)[1:-1] != value]
        self._secrets = sorted(pairs, key=lambda pair: -len(pair[0]))  # longest first: replaced whole

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        """Treat the value of every env var named like a credential (``*_API_KEY``, ``*_TOKEN``, ...) as a secret."""
        env = os.environ if environ is None else environ
        return cls({name: value for name, value in env.items() if name.upper().endswith(_SECRET_ENV_SUFFIXES)})

    def text(self, value: str) -> str:
        """``value`` with every secret in it replaced."""
        return self._text(value)[0]

    def _text(self, value: str) -> tuple[str, str | None]:
        """``text(value)`` and its lower case, or ``None`` for that when a replacement changed it afterwards."""
        for secret, name in self._secrets:
            if secret in value:
                value = value.replace(secret, f"[redacted:{name}]")
        if "://" in value and "@" in value:
            value = _URL_USERINFO.sub(rf"\1{REDACTED}@", value)
        if "=" in value:
            value = _QUERY_SECRET.sub(rf"\1{REDACTED}", value)
        lowered = value.lower()
        before = value
        if _has_any(lowered, _AUTH_HINTS):
            value = _AUTH_HEADER.sub(rf"\1\2{REDACTED}", value)
        if "bearer" in lowered or "Basic" in value:
            value = _BEARER.sub(rf"\1 {REDACTED}", value)
        if _any_search(value, _KEY_SHAPE_HINTS):
            value = _KEY_SHAPES.sub(REDACTED, value)
        return value, (lowered if value == before else None)

    def json(self, value: Any) -> str | None:
        """``value`` as JSON text with secrets replaced: a snapshot, so later mutation cannot leak in.

        Serialising first (in C) and redacting the text is several times faster than walking
        the value in Python; the patterns never touch quotes or backslashes, so it stays valid.
        """
        if value is None:
            return None
        try:
            text = json.dumps(value, ensure_ascii=False, default=_json_default, skipkeys=True)
        except (TypeError, ValueError, RecursionError):
            text = json.dumps(repr(value), ensure_ascii=False)
        return self.json_text(text)

    def json_text(self, text: str) -> str:
        """JSON ``text`` with secrets replaced: in string values and as the values of credential-named fields."""
        text, lowered = self._text(text)
        if lowered is None:
            lowered = text.lower()
        return _redact_secret_fields(text) if _has_secret_field(lowered) else text


def _has_any(text: str, needles: tuple[str, ...]) -> bool:
    """Whether any of ``needles`` is in ``text`` (a plain loop: cheaper than ``any()`` over a generator)."""
    for needle in needles:
        if needle in text:
            return True
    return False


def _any_search(text: str, searches: tuple[Callable[[str], Any], ...]) -> bool:
    """Whether any of the compiled patterns' ``search`` finds something in ``text``."""
    for search in searches:
        if search(text) is not None:
            return True
    return False


def _has_secret_field(lowered: str) -> bool:
    """Whether lower-cased JSON text may name a credential field (``"api_key":``), as :func:`_redact_secret_fields`
    would find it: a quoted name ending like a credential whose whole name is one (so ``"key"`` alone is not)."""
    for ending in _SECRET_KEY_QUOTED:
        at = lowered.find(ending)
        while at != -1:
            end = at + len(ending) - 1
            if _is_secret_key(lowered[lowered.rfind('"', 0, end) + 1 : end]):
                return True
            at = lowered.find(ending, at + 1)
    return False


def _redact_secret_fields(text: str) -> str:
    """Replace the string, object or array value of every field named like a credential (``api_key``, ...)."""
    parts: list[str] = []
    done = 0
    for match in _JSON_FIELD.finditer(text):
        close = match.start()
        if close < done or text[close - 1] == "\\":
            continue  # inside a value already replaced, or an escaped quote inside a string
        key = text[text.rfind('"', 0, close) + 1 : close]
        if not key.lower().endswith(_SECRET_KEY_ENDINGS) or not _is_secret_key(key):
            continue
        try:
            _, end = _DECODER.raw_decode(text, match.end())
        except ValueError:
            continue
        parts += [text[done : match.end()], f'"{REDACTED}"']
        done = end
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _json_default(value: Any) -> Any:
    if hasattr(value, "get_secret_value"):  # pydantic SecretStr / SecretBytes
        return REDACTED
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def _is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY_NAMES.search(key.lower().replace("-", "_")))


# --- settings and URLs ------------------------------------------------------------------

SECRET_WORDS = ("key", "token", "secret", "password", "credential")
SETTING_REDACTED = "<redacted>"  # what a run's stored sampling has always held: stored runs still compare equal


def is_secret_name(name: str) -> bool:
    """A setting's name that may hold a secret (broad on purpose: ``max_tokens`` counts too)."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def without_secrets(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without the entries whose name may hold a secret."""
    return {k: v for k, v in settings.items() if not is_secret_name(k)}


def redact_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with the values of secret-named entries replaced by ``SETTING_REDACTED``."""
    return {k: (SETTING_REDACTED if is_secret_name(k) else v) for k, v in settings.items()}


def strip_credentials(url: str) -> str:
    """Drop user:password@ and the query from a URL before it is stored or shown."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urlunsplit(parts._replace(query=""))
