"""Typed resource scopes: examples per kind (covered, not covered, invalid) with the hostile
tricks a hijacked planner would try, and properties over arbitrary text."""

from __future__ import annotations

import os
import posixpath
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warrant.runner.errors import InvalidRequest, WarrantError
from warrant.runner.scopes import (
    MAX_VALUES,
    InvalidResource,
    InvalidScope,
    ResourceKind,
    covers,
    covers_all,
    legacy_covers,
    normalize,
    resolve_within,
    validate_scope,
    values_of,
)

URL, EMAIL, PATH, IDENTIFIER = (
    ResourceKind.URL,
    ResourceKind.EMAIL,
    ResourceKind.PATH,
    ResourceKind.IDENTIFIER,
)
CYRILLIC_A = "\u0430"
GREEK_EPSILON = "\u03b5"
FULLWIDTH_E = "\uff45"

# --------------------------------------------------------------------------- examples

URL_COVERED = [
    ("https://example.com", "https://example.com"),
    ("https://example.com", "https://example.com:443/"),
    ("https://example.com:443", "https://example.com/x"),
    ("https://example.com", "HTTPS://EXAMPLE.COM/x"),
    ("https://example.com", "https://EXAMPLE.com./"),
    ("https://example.com./", "https://example.com/a"),
    ("https://example.com/api", "https://example.com/api"),
    ("https://example.com/api", "https://example.com/api/x?q=1#frag"),
    ("https://example.com/api", "https://example.com/%61pi/x"),
    ("https://example.com/api", "https://example.com/api/a%20b"),
    ("https://example.com/api/", "https://example.com/api/x"),
    ("https://example.com/api", "https://example.com/api/x?next=https://evil.net/"),
    ("https://*.example.com", "https://a.example.com/"),
    ("https://*.example.com", "https://a.b.EXAMPLE.com./"),
    ("https://bücher.example", "https://xn--bcher-kva.example/"),
    ("https://xn--bcher-kva.example", "https://bücher.example/"),
    ("https://xn--bcher-kva.example", "https://BÜCHER.example/"),
    ("https://*.bücher.example", "https://shop.xn--bcher-kva.example/"),
    ("http://[::1]:8080", "http://[0:0::1]:8080/x"),
    ("http://[2001:db8::1]", "http://[2001:DB8:0:0:0:0:0:1]/"),
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000/"),
    ("https://example.com/wiki/Bücher", "https://example.com/wiki/B%C3%BCcher"),
    ("https://example.com/wiki/B%c3%bccher", "https://example.com/wiki/Bücher/x"),
    ("*", "https://anything.example/at/all"),
]
URL_NOT_COVERED = [
    ("https://example.com", "https://example.com.evil.net/"),
    ("https://example.com", "https://evil.net/example.com"),
    ("https://example.com", "https://evil.net/?https://example.com"),
    ("https://example.com", "http://example.com/"),
    ("https://example.com", "https://example.com:8443/"),
    ("https://example.com", "https://example.com:80/"),
    ("http://example.com", "http://example.com:443/"),
    ("https://example.com/api", "https://example.com/apix"),
    ("https://example.com/api", "https://example.com/"),
    ("https://example.com/api", "https://example.com//api/x"),
    ("https://example.com/api/", "https://example.com/api"),
    ("https://example.com/api", "https://example.com/API"),
    ("https://example.com/api", f"https://example.com/{CYRILLIC_A}pi"),
    ("https://example.com", f"https://ex{CYRILLIC_A}mple.com/"),
    ("https://example.com", f"https://{GREEK_EPSILON}xample.com/"),
    ("https://example.com", "https://sub.example.com/"),
    ("https://*.example.com", "https://example.com/"),
    ("https://*.example.com", "https://badexample.com/"),
    ("https://*.example.com", "https://example.com.evil.net/"),
    ("https://*.example.com", "https://a.example.com:8443/"),
    ("http://[::1]", "http://127.0.0.1/"),
    ("http://127.0.0.1", "http://[::ffff:127.0.0.1]/"),
    ("https://bücher.example", "https://bucher.example/"),
]
URL_INVALID = [
    "https://example.com@evil.net/",
    "https://user:pass@example.com/",
    "https://example.com%40evil.net/",
    "https://example.com\\@evil.net/",
    "https://example.com\\evil",
    "https://example.com/a%2Fb",
    "https://example.com/a%2fb",
    "https://example.com/a%5Cb",
    "https://example.com/api/%2e%2e/admin",
    "https://example.com/api/%2E%2E/admin",
    "https://example.com/api/.%2e/admin",
    "https://example.com/api/../admin",
    "https://example.com/api/./x",
    "https://example.com/api/..",
    "https://example.com/api/..;/admin",
    "https://example.com/api/..%3B/admin",
    "https://example.com/%00",
    "https://example.com/a%0ab",
    "https://example.com/a%7F",
    "https://example.com/%252F",
    "https://example.com/%252e%252e/x",
    "https://example.com/%zz",
    "https://example.com/api/%C0%AE%C0%AE/admin",  # overlong UTF-8 '..'
    "https://example.com/api/%E9t%E9",  # not UTF-8 once decoded
    "https://example.com/api/%u002e%u002e/admin",  # IIS %u encoding
    "https://example.com/api/\u2025/admin",  # TWO DOT LEADER: '..' under NFKC
    "https://example.com/api/%E2%80%A5/admin",
    "https://example.com/api/x\uff0f..\uff0fadmin",  # FULLWIDTH SOLIDUS
    "https://\u212aey.example/",  # KELVIN SIGN lowercases to 'k'
    "https://example.com/100%",
    "https://example.com/a b",
    "https://example.com/a\tb",
    "https://exa\nmple.com/",
    " https://example.com/",
    "https://example.com/\u00a0",
    "https://example.com/\u202e",
    f"https://{FULLWIDTH_E}xample.com/",
    "https://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/",
    "https://example\u3002com/",
    "https://example\uff0ecom/",
    "https://exa\u200bmple.com/",
    "https://exa\u00admple.com/",
    "https://exa%6Dple.com/",
    "https://straße.de/",
    "https://xn--abc-.example/",
    "https://xn--.example/",
    "ftp://example.com/",
    "javascript:alert(1)",
    "file:///etc/passwd",
    "https:example.com",
    "https:/example.com",
    "//example.com/",
    "https:///example.com",
    "https://",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f.0.0.1/",
    "http://0177.0.0.1/",
    "http://1.2.3.4.5/",
    "http://[::1%25eth0]/",
    "http://[v1.fe]/",
    "http://[::1/",
    "http://::1/",
    "https://example.com:0/",
    "https://example.com:65536/",
    "https://example.com:/",
    "https://example.com:\uff18\uff10/",
    "https://example.com:443:443/",
    "https://-example.com/",
    "https://example-.com/",
    "https://a..com/",
    "https://example.com../",
    "https://*.example.com/",
    "https://exa$mple.com/",
    "",
    "https://example.com/" + "a" * 2048,
    "https://example.com/" + "é" * 600,
]
URL_CANONICAL = [
    ("HTTPS://EXAMPLE.com.:443/api/%7e%41?x=é#f", "https://example.com:443/api/~A?x=%C3%A9"),
    ("https://bücher.example/Bücher", "https://xn--bcher-kva.example:443/B%C3%BCcher"),
    ("http://[0:0::1]:08080", "http://[::1]:8080/"),
    ("https://example.com/a%3bb?q=100%", "https://example.com:443/a%3Bb?q=100%25"),
]

EMAIL_COVERED = [
    ("alice@example.com", "alice@example.com"),
    ("alice@example.com", "Alice@EXAMPLE.com."),
    ("ALICE@example.com", "alice@example.com"),
    ("@example.com", "bob@example.com"),
    ("@Example.COM.", "bob.smith+tag@example.com"),
    ("@bücher.example", "a@xn--bcher-kva.example"),
    ("@xn--bcher-kva.example", "a@BÜCHER.example"),
    ("o'brien@example.com", "O'Brien@example.com"),
    ("*", "x@y.org"),
]
EMAIL_NOT_COVERED = [
    ("alice@example.com", "alice@example.com.evil.net"),
    ("alice@example.com", "bob@example.com"),
    ("alice@example.com", "alice+x@example.com"),
    ("@example.com", "bob@sub.example.com"),
    ("@example.com", "bob@evilexample.com"),
    ("@example.com", "bob@example.com.evil.net"),
    ("@example.com", f"bob@ex{CYRILLIC_A}mple.com"),
    ("@example.com", f"bob@{GREEK_EPSILON}xample.com"),
    ("@bücher.example", "a@bucher.example"),
]
EMAIL_INVALID = [
    "Bob <bob@example.com>",
    "<bob@example.com>",
    "bob@example.com (Bob)",
    "bob(comment)@example.com",
    '"bob"@example.com',
    '"bob@evil.net"@example.com',
    "bob @example.com",
    "bob@example.com\n",
    "bob@example.com\r\nBcc: eve@evil.net",
    "bob@@example.com",
    "a@b@example.com",
    "bob@example.com,eve@evil.net",
    "bob@example.com;eve@evil.net",
    "bob",
    "@example.com",
    "bob@",
    f"{CYRILLIC_A}lice@example.com",
    "\uff41lice@example.com",
    "bob%evil.net@example.com",
    "=?utf-8?q?bob=40evil.net?=@example.com",  # an RFC 2047 encoded word
    "=?utf-7?q?bob&AEA-evil.net?=@example.com",
    "evil.net!bob@example.com",
    "bob@[127.0.0.1]",
    "bob@127.0.0.1",
    ".bob@example.com",
    "bob.@example.com",
    "b..ob@example.com",
    f"bob@{FULLWIDTH_E}xample.com",
    "bob@exa\u200bmple.com",
    "bob@example..com",
    "bob@example.com:25",
    "bob\\@example.com",
    "",
    "a" * 65 + "@example.com",
    "a@" + "b" * 250 + ".com",
]

PATH_COVERED = [
    ("/data/out", "/data/out"),
    ("/data/out", "/data/out/a.txt"),
    ("/data/out", "/data/out/sub/./b"),
    ("/data/out/", "/data/out/a"),
    ("/data/out", "//data//out/a/"),
    ("/data/out", "/data/out/..hidden"),
    ("/data/out", "/data/out/a..b"),
    ("/data/out", "/data/out/%2e%2e"),  # no percent-decoding: a file named '%2e%2e'
    ("/data/out", "/data/out/a\\..\\b"),  # a backslash is a file-name character on POSIX
    ("/data/./out", "/data/out/a"),
    ("/", "/etc/passwd"),
    ("*", "/anything"),
]
PATH_NOT_COVERED = [
    ("/data/out", "/data/outside"),
    ("/data/out", "/data/out2/a"),
    ("/data/out", "/data"),
    ("/data/out", "/data/ou"),
    ("/data/out", "/Data/out/a"),
    ("/data/out", f"/d{CYRILLIC_A}ta/out/a"),
    ("/data/out", "/data/\uff4fut/a"),
    ("/data/out", "/data/out\u0301/a"),
]
PATH_INVALID = [
    "/data/out/../secret",
    "/data/out/..",
    "/data/out/../out/a",
    "../data/out",
    "data/out",
    "~/data",
    "",
    "/data/out/a\x00",
    "/data/out/\n",
    "/data/out/\x1b[2J",
    "/data/out/\u202egnp.exe",
    "/data/out/\udc80",
    "/" + "a" * 4096,
]

IDENTIFIER_COVERED = [
    ("acct-42", "acct-42"),
    ("acct-*", "acct-42"),
    ("acct-4?", "acct-42"),
    ("acct-[0-9]*", "acct-42"),
    ("acct-[1]", "acct-[1]"),  # exact, although the scope reads as a glob
    ("acct-[1]", "acct-1"),
    ("café", "cafe\u0301"),  # NFC
    ("DE89 3704 *", "DE89 3704 0044 0532 0130 00"),
    ("*", "anything at all"),
]
IDENTIFIER_NOT_COVERED = [
    ("acct-*", "ACCT-42"),
    ("acct-*", f"{CYRILLIC_A}cct-42"),
    ("acct-*", "\uff41cct-42"),
    ("acct-4?", "acct-420"),
    ("acct-42", "acct-4"),
    ("acct-42", "acct-42 x"),
    ("acct-[0-9]", "acct-x"),
]
IDENTIFIER_INVALID = [
    "",
    " acct",
    "acct ",
    "acct\u3000",
    "acct\n",
    "ac\x00ct",
    "\u200bacct",
    "acct\u202e",
    "a" * 501,
]


def _check_table(kind, covered, not_covered, invalid):
    for scope, value in covered:
        assert covers(kind, scope, value), (scope, value)
    for scope, value in not_covered:
        assert not covers(kind, scope, value), (scope, value)
        normalize(kind, value)  # out of scope, but a valid value
    for value in invalid:
        with pytest.raises(InvalidResource) as caught:
            normalize(kind, value)
        assert caught.value.code == "RESOURCE_INVALID"
        assert not covers(kind, "*", value), value


@pytest.mark.parametrize(
    ("kind", "covered", "not_covered", "invalid"),
    [
        (URL, URL_COVERED, URL_NOT_COVERED, URL_INVALID),
        (EMAIL, EMAIL_COVERED, EMAIL_NOT_COVERED, EMAIL_INVALID),
        (PATH, PATH_COVERED, PATH_NOT_COVERED, PATH_INVALID),
        (IDENTIFIER, IDENTIFIER_COVERED, IDENTIFIER_NOT_COVERED, IDENTIFIER_INVALID),
    ],
    ids=["url", "email", "path", "identifier"],
)
def test_example_table(kind, covered, not_covered, invalid):
    _check_table(kind, covered, not_covered, invalid)


@pytest.mark.parametrize(("value", "canonical"), URL_CANONICAL)
def test_url_canonical_form(value, canonical):
    assert normalize(URL, value) == canonical


def test_canonical_forms_of_other_kinds():
    assert normalize(EMAIL, "Bob.Smith@Bücher.Example.") == "bob.smith@xn--bcher-kva.example"
    assert normalize(PATH, "//data//out/./a/") == "/data/out/a"
    assert normalize(PATH, "/") == "/"
    assert normalize(IDENTIFIER, "cafe\u0301") == "caf\u00e9"


def test_kinds_given_as_strings():
    assert covers("url", "https://example.com", "https://example.com/x")  # type: ignore[arg-type]
    assert normalize("path", "/a/") == "/a"  # type: ignore[arg-type]


def test_non_strings_are_invalid_not_errors():
    for value in (None, 42, b"/data/out", ["/data/out"], {"path": "/data/out"}):
        assert not covers(PATH, "*", value)  # type: ignore[arg-type]
        with pytest.raises(InvalidResource):
            normalize(PATH, value)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- scopes

SCOPES_CANONICAL = [
    (URL, "HTTPS://Example.COM", "https://example.com:443/"),
    (URL, "https://*.Example.com.", "https://*.example.com:443/"),
    (URL, "https://bücher.example/api/", "https://xn--bcher-kva.example:443/api/"),
    (EMAIL, "@Example.COM.", "@example.com"),
    (EMAIL, "Alice@example.com", "alice@example.com"),
    (PATH, "/data//out/", "/data/out"),
    (IDENTIFIER, "acct-*", "acct-*"),
    (URL, "*", "*"),
    (EMAIL, "*", "*"),
    (PATH, "*", "*"),
    (IDENTIFIER, "*", "*"),
]
SCOPES_INVALID = [
    (URL, "https://example.com*"),
    (URL, "https://example.com/api*"),
    (URL, "https://example.com/api/*"),
    (URL, "https://example.com/?q=1"),
    (URL, "https://example.com/#top"),
    (URL, "https://*.*.example.com/"),
    (URL, "https://*/"),
    (URL, "https://*example.com/"),
    (URL, "https://a.*.example.com/"),
    (URL, "https://*.127.0.0.1/"),
    (URL, "https://*.[::1]/"),
    (URL, "https://user@example.com/"),
    (URL, "ftp://example.com/"),
    (URL, ""),
    (EMAIL, "*@example.com"),
    (EMAIL, "@*.example.com"),
    (EMAIL, "example.com"),
    (EMAIL, "@"),
    (EMAIL, "Bob <bob@example.com>"),
    (PATH, "/data/*"),
    (PATH, "/data/out*"),
    (PATH, "data/out"),
    (PATH, "/data/../etc"),
    (IDENTIFIER, " acct-*"),
    (IDENTIFIER, ""),
    (IDENTIFIER, "acct\n*"),
]


@pytest.mark.parametrize(("kind", "scope", "canonical"), SCOPES_CANONICAL)
def test_validate_scope_canonical(kind, scope, canonical):
    assert validate_scope(kind, scope) == canonical
    assert validate_scope(kind, canonical) == canonical


@pytest.mark.parametrize(("kind", "scope"), SCOPES_INVALID)
def test_invalid_scopes_are_refused_and_cover_nothing(kind, scope):
    with pytest.raises(InvalidScope) as caught:
        validate_scope(kind, scope)
    assert caught.value.code == "SCOPE_INVALID"
    for value in ("https://example.com/api/x", "bob@example.com", "/data/out/a", "acct-42"):
        assert not covers(kind, scope, value)


def test_errors_are_in_the_tree():
    assert issubclass(InvalidResource, InvalidRequest) and issubclass(InvalidScope, WarrantError)
    assert InvalidResource("x").to_dict() == {"code": "RESOURCE_INVALID", "message": "x"}
    assert InvalidScope("x").code == "SCOPE_INVALID"


# --------------------------------------------------------------------------- lists


def test_values_of():
    assert values_of("a") == ["a"]
    assert values_of(["a", "b"]) == ["a", "b"]
    assert values_of(("a",)) == ["a"]
    for bad in (42, 1.5, None, True, b"a", {"a": "b"}, [], (), [["a"]], ["a", 1], [None],
                {"a"}, ["a"] * (MAX_VALUES + 1)):  # fmt: skip
        with pytest.raises(InvalidResource):
            values_of(bad)


def test_covers_all():
    scopes = ["@example.com", "carol@partner.org"]
    assert covers_all(EMAIL, scopes, "bob@example.com")
    assert covers_all(EMAIL, scopes, ["bob@example.com", "Carol@Partner.org"])
    assert covers_all(EMAIL, scopes, ("bob@example.com",))
    assert not covers_all(EMAIL, scopes, ["bob@example.com", "dave@partner.org"])
    assert not covers_all(EMAIL, scopes, ["bob@example.com", "eve@example.com.evil.net"])
    assert not covers_all(EMAIL, [], "bob@example.com")
    assert not covers_all(EMAIL, ["*@example.com", "not a scope"], "bob@example.com")
    with pytest.raises(InvalidResource):  # one bad element spoils the list
        covers_all(EMAIL, scopes, ["bob@example.com", "Eve <eve@example.com>"])
    for bad in ([], [["bob@example.com"]], {"to": "bob@example.com"}, 7, None):
        with pytest.raises(InvalidResource):
            covers_all(EMAIL, scopes, bad)
    with pytest.raises(TypeError):  # one string is a sequence whose '*' would cover it all
        covers_all(EMAIL, "x*", "bob@example.com")  # type: ignore[arg-type]


def test_legacy_covers_keeps_todays_behaviour():
    assert legacy_covers("*", "anything")
    assert legacy_covers("public", "public")
    assert legacy_covers("run-output/*", "run-output/a.md")
    assert legacy_covers("https://example.com*", "https://example.com.evil.net/")  # the hole
    assert not legacy_covers("public", "publicx")
    assert not legacy_covers("run-output/*", "run-outpu")
    assert not legacy_covers("*x", "yx")


# --------------------------------------------------------------------------- resolve_within


def test_resolve_within_symlinks(tmp_path):
    scope = tmp_path / "scope"
    outside = tmp_path / "outside"
    (scope / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("x")
    (scope / "file").write_text("x")
    (scope / "escape").symlink_to(outside)
    (scope / "escape_file").symlink_to(outside / "secret")
    (scope / "inner").symlink_to(scope / "sub")
    (tmp_path / "scope_link").symlink_to(scope)
    s = str(scope)
    assert resolve_within(s, f"{s}/file")
    assert resolve_within(s, f"{s}/not-yet-created.txt")
    assert resolve_within(s, f"{s}/inner/new")
    assert resolve_within(s, s)
    assert not resolve_within(s, f"{s}/escape")
    assert not resolve_within(s, f"{s}/escape/secret")
    assert not resolve_within(s, f"{s}/escape_file")
    assert not resolve_within(s, f"{s}/escape/new-file")
    assert not resolve_within(s, f"{s}/sub/../../outside/secret")
    assert not resolve_within(s, str(outside / "secret"))
    assert not resolve_within(s, f"{s}side")
    link = str(tmp_path / "scope_link")
    assert resolve_within(link, f"{link}/file")  # a scope that is itself a link
    assert not resolve_within(link, f"{link}/escape/secret")
    assert not resolve_within(link, f"{s}/file")  # inside once resolved, not as written
    assert resolve_within("*", f"{s}/file")
    assert not resolve_within("*", f"{s}/escape/\x00")
    assert not resolve_within("not a scope", f"{s}/file")


def test_resolve_within_fails_closed():
    def broken(path: str) -> str:
        raise OSError("unreadable")

    assert not resolve_within("/data/out", "/data/out/a", resolve=broken)
    assert not resolve_within("/data/out", "/data/out/a", resolve=lambda p: "relative/x")

    def elsewhere(path: str) -> str:
        return "/data/outside" if path.endswith("/a") else path

    assert not resolve_within("/data/out", "/data/out/a", resolve=elsewhere)
    assert resolve_within("/data/out", "/data/out/a", resolve=lambda p: p)


# --------------------------------------------------------------------------- properties

ANY_TEXT = st.text(max_size=80)
#: Pieces a hijacked planner splices into a value; each is spliced at a random position.
HOSTILE = st.sampled_from(
    ["..", "/..", "/../", "%2e%2e", "%2E", "%2F", "%2f", "%252F", "%5C", "\\", "%00", "\x00",
     "@", "@evil.net", ".evil.net", ":8443", ":", "#", "?", ";", "..;", " ", "\t", "\n",
     "\u200b", "\u202e", "\u3002", "\uff0e", CYRILLIC_A, GREEK_EPSILON, FULLWIDTH_E, "\uff0f",
     "\u0301", "%", "*", "[", "]", "<", ">", '"', "(", ")", ",", "!", "xn--", "-", "."]
) | st.text(max_size=3)  # fmt: skip


def spliced(bases: list[str]) -> st.SearchStrategy[str]:
    """A good value with up to three hostile pieces spliced in (or kept as it is)."""

    def splice(base: str, pieces: list[tuple[int, str]]) -> str:
        for position, piece in pieces:
            at = position % (len(base) + 1)
            base = base[:at] + piece + base[at:]
        return base

    return st.builds(
        splice,
        st.sampled_from(bases),
        st.lists(st.tuples(st.integers(0, 200), HOSTILE), max_size=3),
    )


def weighted(common: list[str], rare: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(common * 3 + rare) | st.text(max_size=6)


URL_PARTS = st.builds(
    "".join,
    st.tuples(
        weighted(["https", "HTTPS"], ["http", "HtTpS", "ftp", "javascript", ""]),
        weighted(["://"], [":/", ":", ":///", "//"]),
        weighted([""], ["user@", "user:pass@", "example.com@", "example.com\\@", "@"]),
        weighted(
            ["example.com", "EXAMPLE.com.", "a.example.com"],
            ["example.com.evil.net", "evil.net", f"ex{CYRILLIC_A}mple.com",
             f"{FULLWIDTH_E}xample.com", "example\u3002com", "exa\u200bmple.com",
             "xn--exmple-4nf.com", "example.com%2e", "127.0.0.1", "[::1]", "example.com..",
             "*.example.com", ""],
        ),
        weighted(["", ":443"], [":0443", ":80", ":8443", ":", ":443:443", ":-1"]),
        st.lists(
            weighted(
                ["api", "x", ""],
                ["apix", "API", "..", ".", "%2e%2e", ".%2E", "%2F", "%252F", "%61pi", "api;x",
                 "..;", "\\", "%00", "é", "%", "a b", "%5C", "api%2F.."],
            ),
            max_size=4,
        ).map(lambda segments: "".join("/" + s for s in segments)),
        weighted(["", "?q=1"], ["?next=https://example.com/api", "#frag", "?%zz#/../"]),
    ),
)  # fmt: skip
URLS = URL_PARTS | spliced(
    ["https://example.com/api", "https://example.com/api/x?q=1", "https://a.example.com/api/"]
)
EMAILS = spliced(["alice@example.com", "Bob.Smith+x@Example.COM.", "carol@sub.example.com"])
PATHS = spliced(["/data/out", "/data/out/a/b.txt", "//data/./out/"]) | st.builds(
    lambda lead, segments: lead + "/".join(segments),
    st.sampled_from(["/", "/data/out/", "//", "", "./", "~/"]),
    st.lists(weighted(["data", "out", "a"], ["..", ".", "", "outside", "\x00"]), max_size=5),
)
IDENTIFIERS = spliced(["acct-42", "acct-", "ACCT-1"]) | st.builds(
    "".join,
    st.tuples(weighted(["acct-"], ["", " ", "ACCT-", f"{CYRILLIC_A}cct-", "\u200b"]), ANY_TEXT),
)
VALUES = {URL: URLS, EMAIL: EMAILS, PATH: PATHS, IDENTIFIER: IDENTIFIERS}
SCOPES = {
    URL: ["*", "https://example.com/api", "https://*.example.com", "http://[::1]:8080/"],
    EMAIL: ["*", "@example.com", "alice@example.com"],
    PATH: ["*", "/", "/data/out"],
    IDENTIFIER: ["*", "acct-*", "acct-4?", "acct-42"],
}
EXAMPLES = settings(max_examples=300, deadline=None)


@EXAMPLES
@given(ANY_TEXT | URLS)
def test_url_covered_means_the_exact_origin_and_path(value):
    if not covers(URL, "https://example.com/api", value):
        return
    parts = urlsplit(normalize(URL, value))
    assert (parts.scheme, parts.hostname, parts.port) == ("https", "example.com", 443)
    assert parts.username is None and parts.password is None
    assert parts.path == "/api" or parts.path.startswith("/api/")
    segments = unquote(parts.path).split("/")
    assert ".." not in segments and "." not in segments
    assert "\\" not in value and "@" not in parts.netloc


@EXAMPLES
@given(ANY_TEXT | URLS)
def test_url_wildcard_covers_subdomains_only(value):
    if covers(URL, "https://*.example.com", value):
        hostname = urlsplit(normalize(URL, value)).hostname or ""
        assert hostname.endswith(".example.com") and hostname.isascii()


@EXAMPLES
@given(ANY_TEXT | EMAILS)
def test_email_domain_scope_means_exactly_that_domain(value):
    if covers(EMAIL, "@example.com", value):
        canonical = normalize(EMAIL, value)
        local, domain = canonical.split("@")
        assert domain == "example.com" and local and local.isascii()
        assert not any(c.isspace() or c in '"()<>,;' for c in value)


@EXAMPLES
@given(ANY_TEXT | PATHS)
def test_path_covered_means_below_the_scope(value):
    if covers(PATH, "/data/out", value):
        canonical = normalize(PATH, value)
        assert canonical == "/data/out" or canonical.startswith("/data/out/")
        assert ".." not in value.split("/")
        assert canonical == posixpath.normpath(canonical) and "\x00" not in canonical


@EXAMPLES
@given(ANY_TEXT | IDENTIFIERS)
def test_identifier_glob(value):
    if covers(IDENTIFIER, "acct-*", value):
        canonical = normalize(IDENTIFIER, value)
        assert fnmatchcase(canonical, "acct-*") and canonical.startswith("acct-")
        assert canonical == canonical.strip()


@EXAMPLES
@given(st.sampled_from(list(ResourceKind)), st.data())
def test_covers_never_raises_and_normalize_is_idempotent(kind, data):
    value = data.draw(st.text(max_size=60) | VALUES[kind])
    for scope in SCOPES[kind]:
        assert isinstance(covers(kind, scope, value), bool)
    try:
        canonical = normalize(kind, value)
    except InvalidResource:
        assert not covers(kind, "*", value)
        return
    assert covers(kind, "*", value)
    assert normalize(kind, canonical) == canonical
    for scope in SCOPES[kind]:
        assert covers(kind, scope, canonical) == covers(kind, scope, value)


@EXAMPLES
@given(st.sampled_from(list(ResourceKind)), st.data())
def test_validate_scope_is_idempotent_and_matches_covers(kind, data):
    scope = data.draw(st.text(max_size=40) | VALUES[kind])
    try:
        canonical = validate_scope(kind, scope)
    except InvalidScope:
        assert not covers(kind, scope, "x")
        return
    assert validate_scope(kind, canonical) == canonical


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=10) | URLS, max_size=4) | ANY_TEXT | st.integers())
def test_covers_all_is_covers_of_every_element(argument):
    scopes = ["https://example.com/api", "https://*.example.com"]
    try:
        values = values_of(argument)
        result = covers_all(URL, scopes, argument)
    except InvalidResource:
        if isinstance(argument, list) and argument:
            assert not all(covers(URL, "*", v) for v in argument)
        return
    assert result == all(any(covers(URL, s, v) for s in scopes) for v in values)


def test_no_filesystem_outside_resolve_within(monkeypatch):
    """Only resolve_within touches the filesystem."""

    def no_fs(*args, **kwargs):
        raise AssertionError("filesystem access")

    monkeypatch.setattr(os.path, "realpath", no_fs)
    monkeypatch.setattr(os, "stat", no_fs)
    monkeypatch.setattr(os, "lstat", no_fs)
    assert covers(PATH, "/data/out", "/data/out/a")
    assert normalize(PATH, "/data/out/./a") == "/data/out/a"


def test_module_is_pure_and_documented():
    """Standard library and the core's errors only; every public name documented."""
    import ast
    import sys

    from warrant.runner import scopes

    tree = ast.parse(Path(scopes.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
    }
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    allowed = {"warrant.runner.errors", "warrant.runner.codes", "__future__"}
    third_party = {m for m in imported - allowed if m.split(".")[0] not in sys.stdlib_module_names}
    assert third_party == set()
    for name in scopes.__all__:
        obj = getattr(scopes, name)
        if callable(obj):
            assert obj.__doc__, name
