"""Typed resource scopes: which arguments of a call name resources, and whether a grant's
scope covers them.

Values and scopes are put in a canonical form first, then matched per kind (never as a text
prefix, so ``https://example.com`` does not cover ``https://example.com.evil.net/``):

==========  ================================  ==============================================
kind        a value                           a scope
==========  ================================  ==============================================
PATH        ``/data/out/a.txt`` (absolute,    ``/data/out``: that path and everything below
            no ``..``)                        it, on a path-component boundary
URL         ``https://example.com/api/x?q``   ``https://example.com/api``: same scheme, host
            (http(s), no userinfo)            and port, path below on a segment boundary;
                                              ``https://*.example.com/`` any subdomain
EMAIL       ``alice@example.com``             ``alice@example.com`` exactly, or
                                              ``@example.com`` (that domain, no subdomains)
IDENTIFIER  ``acct-42``                       ``acct-42`` exactly, or a case-sensitive glob
                                              (``acct-*``, ``acct-4?``, ``acct-[0-9]*``)
==========  ================================  ==============================================

``*`` is every valid value of a kind. An invalid value (``normalize`` raises) is covered by no
scope. ``legacy_covers`` keeps the old text matching for tools that declare no typed resource.
"""

from __future__ import annotations

import encodings.idna as _idna
import ipaddress
import os
import posixpath
import re
import string
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any, NamedTuple
from urllib.parse import unquote_to_bytes

from warrant.runner.codes import ErrorCode
from warrant.runner.errors import InvalidRequest

__all__ = [
    "MAX_LENGTH",
    "MAX_VALUES",
    "InvalidResource",
    "InvalidScope",
    "ResourceKind",
    "covers",
    "covers_all",
    "legacy_covers",
    "normalize",
    "resolve_within",
    "resource_kind",
    "resource_values",
    "top_argument",
    "validate_scope",
    "values_of",
]


class ResourceKind(StrEnum):
    """What a resource argument names; it decides how a scope is matched."""

    PATH = "path"
    """A filesystem path: normalised; ``..`` and symlink escapes refused."""
    URL = "url"
    """An http(s) URL: scheme, host and port exactly, then a path prefix."""
    EMAIL = "email"
    """An address, or every address of a ``@domain``."""
    IDENTIFIER = "identifier"
    """Anything else with a name (an account, an IBAN, a ticket): exact or a glob."""


class InvalidResource(InvalidRequest):
    """A value that cannot be a resource of its kind: the gate refuses the call."""

    code: str = ErrorCode.RESOURCE_INVALID


class InvalidScope(InvalidRequest):
    """A grant scope that is not a valid scope of its kind (checked when a grant is made)."""

    code: str = ErrorCode.SCOPE_INVALID


#: Longest value (and canonical form) accepted per kind, in characters.
MAX_LENGTH: dict[str, int] = {"path": 4096, "url": 2048, "email": 254, "identifier": 500}
#: Most elements in one list-valued resource argument.
MAX_VALUES = 1000

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Control, format (zero-width, bidi), surrogate and line/paragraph separator characters.
_CONTROL = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_PCHAR = _UNRESERVED | frozenset("!$&'()*+,;=:@")
_QCHAR = _PCHAR | frozenset("/?")
_HEX = frozenset(string.hexdigits)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_NUMERIC = re.compile(r"[0-9]+|0x[0-9a-f]*")
_PORT = re.compile(r"[0-9]{1,5}")
_DOUBLE_ENCODED = re.compile(r"%25[0-9A-Fa-f]{2}")
#: RFC 5322 dot-atom, lowercase, without ``%`` and ``!`` (source routing through a relay),
#: ``=`` and ``?`` (RFC 2047 encoded words a mail system may decode into another address).
_LOCAL = re.compile(r"[a-z0-9#$&'*+/^_{|}~-]+(?:\.[a-z0-9#$&'*+/^_{|}~-]+)*")
_EMAIL_FORBIDDEN = frozenset('"()<>[]\\,;:')


class _Url(NamedTuple):
    scheme: str
    host: str
    port: int
    path: str
    query: str

    def __str__(self) -> str:
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{self.host}:{self.port}{self.path}{query}"


def _is_control(char: str) -> bool:
    return unicodedata.category(char) in _CONTROL


def _text(kind: ResourceKind, value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_LENGTH[kind]:
        raise ValueError(f"a {kind} must be a string of 1 to {MAX_LENGTH[kind]} characters")
    return value


def _label(label: str) -> str:
    """One host label as ASCII: Unicode only in its canonical (nameprep-stable) form."""
    if not label.isascii():
        if any(not c.isascii() and c.lower().isascii() for c in label):  # KELVIN SIGN
            raise ValueError("a host label with a character that lowercases to ASCII")
        label = unicodedata.normalize("NFC", label.lower())
        if _idna.nameprep(label) != label:
            raise ValueError("a host label that IDNA would map (fullwidth, zero-width, ß, ...)")
        label = _idna.ToASCII(label).decode("ascii")
    label = label.lower()
    if label.startswith("xn--"):
        decoded = _idna.ToUnicode(label)  # raises when it does not round-trip
        if decoded.isascii() or _idna.nameprep(decoded) != decoded:
            raise ValueError("a punycode label that is not canonical")
    if not _LABEL.fullmatch(label):
        raise ValueError("a host label that is not letters, digits, '-' and '_'")
    return label


def _host(host: str, *, ip_ok: bool) -> str:
    """A domain name as lowercase ASCII (IDNA), or with ``ip_ok`` a dotted-quad IPv4."""
    if not host or "%" in host or "\u3002" in host:
        raise ValueError("an empty or encoded host")
    if host.endswith("."):
        host = host[:-1]
    labels = [_label(label) for label in host.split(".")]
    name = ".".join(labels)
    if _NUMERIC.fullmatch(labels[-1]):  # browsers read it as an IPv4 address: be exact
        if not ip_ok:
            raise ValueError("an IP address where a domain name is needed")
        return str(ipaddress.IPv4Address(name))
    if len(name) > 253:
        raise ValueError("a host name longer than 253 characters")
    return name


def _authority(authority: str, scheme: str, *, wildcard: bool) -> tuple[str, int]:
    if "@" in authority:
        raise ValueError("a URL with userinfo")
    if authority.startswith("["):
        inner, bracket, rest = authority[1:].partition("]")
        if not bracket or not inner or not set(inner) <= _HEX | {":", "."}:
            raise ValueError("a malformed IPv6 literal")
        host = f"[{ipaddress.IPv6Address(inner).compressed}]"
    else:
        name, colon, port_text = authority.partition(":")
        rest = colon + port_text
        if wildcard and name.startswith("*."):
            host = "*." + _host(name[2:], ip_ok=False)
        else:
            host = _host(name, ip_ok=True)
    if not rest:
        return host, _DEFAULT_PORTS[scheme]
    if not (rest.startswith(":") and _PORT.fullmatch(rest[1:]) and 0 < int(rest[1:]) < 65536):
        raise ValueError("a URL with a bad port")
    return host, int(rest[1:])


def _encode(part: str, allowed: frozenset[str], *, strict: bool) -> str:
    """Percent-decode unreserved characters, percent-encode what is not ``allowed``. With
    ``strict`` (a path) a lone ``%`` or an encoded ``/``, ``\\`` or control character is
    refused."""
    out: list[str] = []
    i = 0
    while i < len(part):
        char = part[i]
        if char == "%":
            digits = part[i + 1 : i + 3]
            if len(digits) != 2 or not set(digits) <= _HEX:
                if strict:
                    raise ValueError("a '%' not followed by two hex digits in a URL path")
                out.append("%25")  # a lone '%' in a query, as browsers send it
                i += 1
                continue
            byte = int(digits, 16)
            if strict and (byte < 0x20 or byte in (0x2F, 0x5C, 0x7F)):
                raise ValueError("an encoded '/', '\\' or control character in a URL path")
            out.append(chr(byte) if chr(byte) in _UNRESERVED else f"%{digits.upper()}")
            i += 3
            continue
        out.append(char if char in allowed else "".join(f"%{b:02X}" for b in char.encode()))
        i += 1
    return "".join(out)


def _url_path(raw: str) -> str:
    path = _encode(raw or "/", _PCHAR | {"/"}, strict=True)
    if _DOUBLE_ENCODED.search(path):
        raise ValueError("a double-encoded character in a URL path")
    try:
        decoded = unquote_to_bytes(path).decode("utf-8")  # refuses overlong '%C0%AE'
    except UnicodeDecodeError:
        raise ValueError("a URL path that is not UTF-8 once decoded") from None
    for form in (decoded, unicodedata.normalize("NFKC", decoded)):  # '\u2025', '\uff0f'
        if any(s.split(";")[0] in (".", "..") for s in re.split(r"[/\\]", form)):
            raise ValueError("a '.' or '..' segment in a URL path (also '..;', encoded)")
    return path


def _url(value: object, *, scope: bool = False) -> _Url:
    text = _text(ResourceKind.URL, value)
    if any(_is_control(c) or c.isspace() or c == "\\" for c in text):
        raise ValueError("a control character, whitespace or backslash in a URL")
    match = _SCHEME.fullmatch(text)
    scheme = match[1].lower() if match else ""
    if scheme not in _DEFAULT_PORTS or not match or not match[2].startswith("//"):
        raise ValueError("not an http(s)://host URL")
    rest = match[2][2:]
    cut = min([i for i in map(rest.find, "/?#") if i >= 0], default=len(rest))
    rest, hash_, _fragment = rest[cut:].partition("#")
    path, question, query = rest.partition("?")
    if scope and (hash_ or question or "*" in path):
        raise ValueError("a URL scope with a query, fragment or '*' in its path")
    host, port = _authority(match[2][2 : 2 + cut], scheme, wildcard=scope)
    url = _Url(scheme, host, port, _url_path(path), _encode(query, _QCHAR, strict=False))
    if len(str(url)) > MAX_LENGTH[ResourceKind.URL]:
        raise ValueError("a URL too long once canonical")
    return url


def _email(value: object, *, scope: bool = False) -> str:
    text = _text(ResourceKind.EMAIL, value)
    if any(_is_control(c) or c.isspace() or c in _EMAIL_FORBIDDEN for c in text):
        raise ValueError("whitespace, quotes, comments or a display name in an address")
    local, at, domain = text.partition("@")
    if not at or "@" in domain:
        raise ValueError("an address needs exactly one '@'")
    domain = _host(domain, ip_ok=False)
    if scope and not local:
        return f"@{domain}"
    local = local.lower()
    if scope and "*" in local:
        raise ValueError("a '*' in an address scope (write '@domain' for a whole domain)")
    address = f"{local}@{domain}"
    if len(local) > 64 or len(address) > MAX_LENGTH["email"] or not _LOCAL.fullmatch(local):
        raise ValueError("a local part that is not a plain ASCII dot-atom, or too long")
    return address


def _path(value: object, *, scope: bool = False) -> str:
    text = _text(ResourceKind.PATH, value)
    if not text.startswith("/") or any(_is_control(c) for c in text):
        raise ValueError("not an absolute path, or a control character in it")
    if ".." in text.split("/"):
        raise ValueError("a '..' segment in a path")
    if scope and "*" in text:
        raise ValueError("a '*' in a path scope (a scope covers everything below it)")
    path = posixpath.normpath(text)
    return "/" + path.lstrip("/")  # POSIX keeps a leading '//'; Linux reads it as '/'


def _identifier(value: object, *, scope: bool = False) -> str:
    text = _text(ResourceKind.IDENTIFIER, value)
    if any(_is_control(c) for c in text):
        raise ValueError("a control character in an identifier")
    text = unicodedata.normalize("NFC", text)
    if text != text.strip() or len(text) > MAX_LENGTH[ResourceKind.IDENTIFIER]:
        raise ValueError("an identifier with surrounding whitespace or too long")
    return text


def _canonical(kind: ResourceKind, value: object, *, scope: bool) -> str:
    if kind is ResourceKind.URL:
        return str(_url(value, scope=scope))
    parse = {"email": _email, "path": _path}.get(kind, _identifier)
    return parse(value, scope=scope)


def _below(scope_path: str, path: str) -> bool:
    """``path`` is ``scope_path`` or below it, on a ``/`` boundary."""
    if scope_path.endswith("/"):
        return path.startswith(scope_path)
    return path == scope_path or path.startswith(scope_path + "/")


def _match(kind: ResourceKind, scope: str, value: str) -> bool:
    """Both canonical, scope not ``*``."""
    if kind is ResourceKind.URL:
        s, v = _url(scope, scope=True), _url(value)
        host_ok = v.host.endswith(s.host[1:]) if s.host.startswith("*.") else s.host == v.host
        return host_ok and (s.scheme, s.port) == (v.scheme, v.port) and _below(s.path, v.path)
    if kind is ResourceKind.EMAIL:
        return scope == value or (scope.startswith("@") and value.endswith(scope))
    if kind is ResourceKind.PATH:
        return _below(scope, value)
    return scope == value or fnmatchcase(value, scope)


def normalize(kind: ResourceKind, value: str) -> str:
    """The canonical form of ``value`` as a resource of ``kind``; raises
    :class:`InvalidResource` when it cannot be one."""
    kind = ResourceKind(kind)
    try:
        return _canonical(kind, value, scope=False)
    except ValueError as exc:  # UnicodeError and ipaddress errors are ValueErrors
        raise InvalidResource(f"not a valid {kind} resource: {exc}") from None


def validate_scope(kind: ResourceKind, scope: str) -> str:
    """The canonical form of a grant scope of ``kind`` (``*``: every valid value); raises
    :class:`InvalidScope` when it is not one."""
    kind = ResourceKind(kind)
    if scope == "*":
        return scope
    try:
        return _canonical(kind, scope, scope=True)
    except ValueError as exc:
        raise InvalidScope(f"not a valid {kind} scope: {exc}") from None


def covers(kind: ResourceKind, scope: str, value: str) -> bool:
    """Whether ``value`` is a valid resource of ``kind`` inside ``scope``. Never raises for
    a bad value or scope: either makes the answer False."""
    kind = ResourceKind(kind)
    try:
        canonical = _canonical(kind, value, scope=False)
        if scope == "*":
            return True
        return _match(kind, _canonical(kind, scope, scope=True), canonical)
    except ValueError:
        return False


def values_of(argument: object) -> list[str]:
    """The values of a resource argument: a string, or a non-empty list or tuple of strings
    (at most :data:`MAX_VALUES`); anything else raises :class:`InvalidResource`."""
    if isinstance(argument, str):
        return [argument]
    if (
        isinstance(argument, list | tuple)
        and 0 < len(argument) <= MAX_VALUES
        and all(isinstance(item, str) for item in argument)
    ):
        return list(argument)
    raise InvalidResource("a resource argument must be a string or a list of strings")


def resource_values(arguments: Mapping[str, Any], name: str) -> list[str]:
    """The values of the resource ``name`` (a key of ``Tool.resources``) in a call's
    ``arguments``: a top-level argument (a string or a list of strings, :func:`values_of`),
    or a field of objects inside one: ``attachments[].file_id`` is the ``file_id`` of each
    object of the ``attachments`` list, ``target.id`` the ``id`` of the ``target`` object. An
    absent argument or field has no value; a value of the wrong shape raises
    :class:`InvalidResource`."""
    found: list[Any] = [arguments]
    for part in name.replace("[]", ".[]").split("."):
        deeper: list[Any] = []
        for value in found:
            if part == "[]" and isinstance(value, list | tuple) and len(value) <= MAX_VALUES:
                deeper.extend(value)
            elif part != "[]" and isinstance(value, Mapping):
                if value.get(part) is not None:
                    deeper.append(value[part])
            else:
                raise InvalidResource(f"{name}: not the shape this resource names")
        found = deeper
    return [text for value in found for text in values_of(value)]


_INDEX = re.compile(r"\[\d+\]")


def top_argument(path: str) -> str:
    """The argument a leaf path or a resource name is inside (``attachments`` of
    ``attachments[0].file_id`` and of ``attachments[].file_id``)."""
    return path.split(".")[0].split("[")[0]


def resource_kind(resources: Mapping[str, ResourceKind], path: str) -> ResourceKind | None:
    """The kind of the resource an argument leaf at ``path`` (``to[1]``,
    ``attachments[0].file_id``) is part of, or None: a declared top-level argument covers
    every leaf inside it; a declared field path (``attachments[].file_id``) its own leaves."""
    top = top_argument(path)
    if top in resources:
        return resources[top]
    general = _INDEX.sub("[]", path)
    for name, kind in resources.items():
        if general == name or general.startswith((f"{name}.", f"{name}[")):
            return kind
    return None


def covers_all(kind: ResourceKind, scopes: Sequence[str], argument: object) -> bool:
    """Whether every value of ``argument`` is inside at least one of ``scopes``. Raises
    :class:`InvalidResource` when the argument is malformed or one of its values is invalid
    (so the gate can tell "invalid" from "out of scope"); an invalid scope covers nothing."""
    if isinstance(scopes, str):
        raise TypeError("scopes must be a sequence of scopes, not one string")
    kind = ResourceKind(kind)
    values = [normalize(kind, value) for value in values_of(argument)]
    return all(any(covers(kind, scope, value) for scope in scopes) for value in values)


def resolve_within(
    scope: str, path: str, *, resolve: Callable[[str], str] = os.path.realpath
) -> bool:
    """For a tool at execution time: ``path`` is inside ``scope`` both as written and after
    ``resolve`` (symlinks followed) on both sides. The only function that reads the
    filesystem. The answer holds at the moment of the check: open with ``O_NOFOLLOW`` (or in
    a directory file descriptor) to keep it true."""
    if not covers(ResourceKind.PATH, scope, path):
        return False
    try:
        real = _path(resolve(_path(path)))
        if scope == "*":
            return True
        return _below(_path(resolve(_path(scope))), real)
    except (ValueError, OSError, RuntimeError):
        return False


def legacy_covers(scope: str, value: str) -> bool:
    """Today's untyped matching, for tools that declare no typed resource: ``*``, the exact
    value, or a text prefix when ``scope`` ends with ``*``."""
    return scope == "*" or scope == value or (scope.endswith("*") and value.startswith(scope[:-1]))
