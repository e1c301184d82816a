"""Provenance: where each argument value of a write or egress call came from, and what a flag
does (the gate's provenance layer).

Trusted text is what the user and trusted tools said: the goal, the spec (its planner section
excluded: a scripted planner's outputs are the model's), and observations of tools whose
contract declares ``output_source=trusted-tool``. Every other observation is untrusted (a
tool's output is untrusted unless its contract says otherwise).

Each argument value gets an **origin**: ``trusted`` (it appears in trusted text), ``untrusted``
(only in an untrusted observation: which one, with an excerpt), ``unseen`` (nowhere the run
read: the model made it up, or knew it from elsewhere), or ``unchecked`` (free text that
proves nothing either way). Values are matched as whole tokens, case-insensitively.

Two origins come from the items of untrusted outputs whose tools declare who wrote each
(``Tool.attribution``, :mod:`warrant.runner.vouching`), and pass like trusted ones:
``vouched`` (found in an item whose author the user named: "the link Bob sent me") and
``author`` (for a tool that sends replies, ``UntrustedPolicy.replies``: a destination that
is an item's author as the service reports it, a mail's sender). A call to a destination
only an ``author`` origin vouches for is ``disclosed`` when it carries what another
observation said (the replies below): a third party's data is handled like an
untrusted destination (the sender may be the attacker asking for the figures), the user's
own (a trusted tool's) is asked about.

What must be trusted, and what a value that is not does (:class:`~warrant.tools._contract.
UntrustedPolicy`, per tool):

* **destinations**: the typed resources of a write or an egress read (``Tool.resources``),
  matched with no length floor (a URL by its host, a path by itself or its folder, an
  address or an identifier whole), and **credentials** (``secret_fields``): a password the
  attacker chose is a way in. Default: refused, ``UNTRUSTED_DESTINATION``.
* **copied**: a whole value of at least :data:`MIN_CHARS` characters copied from untrusted
  content that no source the user named vouches for. Default: refused,
  ``UNTRUSTED_CONTENT`` (an injection's words never become an effect verbatim).
* **content**: URLs, e-mail addresses and IBANs an agent with its own loop (planner kind
  ``external``) wrote into any other string argument that nothing the run read supplied,
  and the user's own data a reply carries. Default: the call waits for a person, who is
  shown the flag (``UNTRUSTED_ARGUMENT``); no pre-approval covers it. A planner inside
  warrant reads only what the run read: such a link is a destination
  (``ProvenanceSources.whole_context``).

``allow`` lets a flag through and traces it (``policy.provenance.checked`` ``allowed``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from warrant.runner.codes import ObservationSource, Rejection
from warrant.runner.disclosure import (
    MAX_DATA_TOKENS,
    MAX_EXEMPT,
    MAX_WINDOW,
    MIN_DATA_CHARS,
    data_tokens,
    disclosures,
    payload,
    private_disclosures,
    squeeze,
    squeezed_tokens,
    top_argument,
)
from warrant.runner.mentions import (
    destination_candidates,
    emails,
    find,
    fold,
    leaf_strings,
    split_urls,
    url_key,
)
from warrant.runner.scopes import ResourceKind, resource_kind
from warrant.runner.spec import ToolProposal
from warrant.runner.views import ProvenanceSources
from warrant.runner.vouching import MAX_ITEMS, MIN_NAME_CHARS, Item, items_of, named_as
from warrant.tools._contract import Attribution, FlagAction, SideEffect, Tool

__all__ = [
    "EXCERPT_CHARS",
    "MAX_DATA_TOKENS",
    "MAX_EXEMPT",
    "MAX_ITEMS",
    "MAX_WINDOW",
    "MIN_CHARS",
    "MIN_DATA_CHARS",
    "MIN_NAME_CHARS",
    "MIN_VOUCHED_CHARS",
    "Item",
    "SourcesSoFar",
    "analyse",
    "data_tokens",
    "disclosures",
    "embedded_values",
    "flag_reason",
    "items_of",
    "leaf_strings",
    "named_as",
    "payload",
    "provenance_of",
    "refusal",
    "sources_from",
    "squeeze",
    "squeezed_tokens",
    "trace_details",
    "vouched",
]

#: Shorter free-text values ("1", "yes", "EUR") appear everywhere and prove nothing; typed
#: destinations and credentials have no floor.
MIN_CHARS = 4
#: Characters of untrusted context shown on each side of a flagged value.
EXCERPT_CHARS = 60

_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")


def embedded_values(text: str) -> list[tuple[ResourceKind, str]]:
    """URLs, e-mail addresses and IBANs inside free text (a phishing link in a message body)."""
    found: list[tuple[ResourceKind, str]] = []
    urls, rest = split_urls(text)
    found += [(ResourceKind.URL, u) for u in urls]
    found += [(ResourceKind.EMAIL, address) for address in emails(rest)]
    found += [(ResourceKind.IDENTIFIER, m.group(0)) for m in _IBAN.finditer(rest)]
    return found


# --- the sources: the text a run's argument values may come from, sorted by whose words it is
# (the user's, a trusted tool's, an untrusted observation's and, within those, the items whose
# author the user named)


#: Observations whose text is trusted: a person's answer, a tool that declares its output so.
_TRUSTED_SOURCES = frozenset({ObservationSource.USER.value, ObservationSource.TRUSTED_TOOL.value})


def sources_from(
    goal: str,
    spec: dict[str, Any],
    observations: list[list[Any]],
    *,
    attributions: Mapping[str, Attribution] | None = None,
    listings: Mapping[str, Mapping[str, ResourceKind]] | None = None,
    privates: Mapping[str, frozenset[str]] | None = None,
) -> ProvenanceSources:
    """The sources of ``observations`` (:class:`SourcesSoFar`, all of them at once)."""
    so_far = SourcesSoFar(
        goal, spec, attributions=attributions, listings=listings, privates=privates
    )
    for observation_id, source, content in observations:
        so_far.add(observation_id, source, content)
    return so_far.sources()


class SourcesSoFar:
    """Trusted text: the goal, the spec without its planner section (a scripted planner's
    outputs are the model's, not the user's), a person's answers and trusted tools'
    observations; untrusted: every other tool's. Policy refusals are neither. ``task``: the
    same trusted text by the source name a task-scoped grant gives it. ``attributions``
    (tool name -> ``Attribution``): the items of those tools' untrusted outputs, each with the
    user's word naming its author if any (``named``), and the authors a reply may go to.
    ``listings``, ``privates`` (``Tool.listing``, ``Tool.private``): what outputs list, hold.

    One observation at a time (:meth:`add`): a replay reads each step's sources as the
    observations before it left them, each observation read once."""

    def __init__(
        self,
        goal: str,
        spec: dict[str, Any],
        *,
        attributions: Mapping[str, Attribution] | None = None,
        listings: Mapping[str, Mapping[str, ResourceKind]] | None = None,
        privates: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self._spec = spec or {}
        self._user_spec = {k: v for k, v in self._spec.items() if k != "planner"}
        spec_text = [text for _, text in leaf_strings(self._user_spec)]
        self._attributions = attributions or {}
        self._listings = listings or {}
        self._privates = privates or {}
        self.trusted = [goal, *spec_text]
        self.user = [goal]  # the user's own words: never the spec's settings
        self.task = [("goal", goal), *(("spec", text) for text in spec_text)]
        self.untrusted: list[tuple[str, str]] = []
        self.attributed: list[tuple[str, Any, Attribution]] = []
        self.listed: list[tuple[str, str, str]] = []
        self.private: list[tuple[str, str, str]] = []

    def add(self, observation_id: str, source: str, content: Any) -> None:
        if source == ObservationSource.POLICY.value:
            return  # a refusal echoes the model's own proposal: it vouches for nothing
        # every number: a short id a tool returned is still what it said
        text = "\n".join(t for _, t in leaf_strings(content, numbers=True))
        self.listed += _listed(observation_id, content, self._listings)
        self.private += _private(observation_id, content, self._privates)
        if source in _TRUSTED_SOURCES:
            self.trusted.append(text)
            if source == ObservationSource.USER.value:
                self.user.append(text)
            if (name := _task_source(observation_id, source, content)) is not None:
                self.task.append((name, text))
        else:  # untrusted-content, and any source this version does not know
            self.untrusted.append((observation_id, text))
            found = _attribution(content, self._attributions)
            if found is not None:
                self.attributed.append((observation_id, content.get("output"), found))

    def sources(self) -> ProvenanceSources:
        """The sources of the observations added so far."""
        items, authors, documents = _attributed(
            self.attributed,
            "\n".join(self.user),
            self._user_spec.get("subject"),
            listed=self.listed,
        )
        task = [*self.task, *(("authors", author) for _, author, _ in authors)]
        task += [
            ("named", t) for i, _, t, named in items if named is not None and i not in documents
        ]
        return ProvenanceSources(
            trusted=tuple(self.trusted),
            untrusted=tuple(self.untrusted),
            task=(*task, *(("listed", value) for _, _, value in self.listed)),
            items=tuple(items),
            authors=tuple(authors),
            user=tuple(self.user),
            listed=tuple(self.listed),
            private=tuple(self.private),
            documents=frozenset(documents),
            whole_context=(self._spec.get("planner") or {}).get("kind") != "external",
        )


def _listed(
    observation_id: str, content: Any, listings: Mapping[str, Mapping[str, ResourceKind]]
) -> list[tuple[str, str, str]]:
    """The resources a listing tool's succeeded output names (``Tool.listing``)."""
    if not isinstance(content, dict) or content.get("status", "succeeded") != "succeeded":
        return []
    listing = listings.get(str(content.get("tool")))
    output = content.get("output")
    found = []
    for path, kind in (listing or {}).items():
        values = _values_at(output, path)
        found += [(observation_id, kind.value, value) for value in values[:MAX_ITEMS]]
    return found


def _private(
    observation_id: str, content: Any, privates: Mapping[str, frozenset[str]]
) -> list[tuple[str, str, str]]:
    """The private data a tool's succeeded output holds (``Tool.private``)."""
    if not isinstance(content, dict) or content.get("status", "succeeded") != "succeeded":
        return []
    fields = privates.get(str(content.get("tool"))) or frozenset()
    output = content.get("output")
    return [(observation_id, f, v) for f in sorted(fields) for v in _values_at(output, f)]


def _values_at(output: Any, path: str) -> list[str]:
    """The strings and integers at ``path`` (``files[].id``, ``[]``) in ``output``."""
    found: list[Any] = [output]
    for part in [p for p in path.replace("[]", ".[]").split(".") if p]:
        deeper: list[Any] = []
        for value in found:
            if part == "[]" and isinstance(value, list | tuple):
                deeper.extend(value[:MAX_ITEMS])
            elif part != "[]" and isinstance(value, Mapping) and part in value:
                deeper.append(value[part])
        found = deeper
    return [str(v) for v in found if isinstance(v, str | int) and not isinstance(v, bool)]


def _attributed(
    attributed: list[tuple[str, Any, Attribution]],
    user: str,
    subject: Any,
    *,
    listed: list[tuple[str, str, str]],
) -> tuple[list[tuple[str, str, str, str | None]], list[tuple[str, str, str]], set[str]]:
    """The items of the attributed observations (each with the user's word naming its author,
    if any, or its place as a listing named it: ``Attribution.listed``), the authors a reply
    may go to, and the items that vouch for no destination (``Attribution.destinations``)."""
    items, authors, documents = [], [], set()
    own = subject if isinstance(subject, str) else ""  # the user's own address
    listed_places = frozenset(fold(value.strip()) for _, _, value in listed)
    for observation_id, output, attribution in attributed:
        for item in items_of(
            observation_id, output, attribution, strings=lambda v: leaf_strings(v, numbers=True)
        ):
            named = named_as(item, user, own=own)
            place = fold(item.place) if len(item.place) >= MIN_NAME_CHARS else ""
            if named is None and attribution.listed and place and place in listed_places:
                named = item.place
            items.append((item.item_id, item.author, item.text, named))
            if attribution.replies and item.author:
                authors.append((item.item_id, item.author, attribution.kind.value))
            if not attribution.destinations and named is not None and named == item.place:
                documents.add(item.item_id)  # named by its place: content only
    return items, authors, documents


def _attribution(content: Any, attributions: Mapping[str, Attribution]) -> Attribution | None:
    if not isinstance(content, dict) or content.get("status", "succeeded") != "succeeded":
        return None
    tool = content.get("tool")
    return attributions.get(tool) if isinstance(tool, str) else None


def _task_source(observation_id: str, source: str, content: Any) -> str | None:
    """The ``destinations_from`` name of a trusted observation: ``answers`` for a person's
    answer, ``observations:<tool>`` for a trusted tool's output (None for the goal's own)."""
    if source == ObservationSource.USER.value:
        return None if observation_id == "user-1" else "answers"
    tool = content.get("tool") if isinstance(content, dict) else None
    return f"observations:{tool}" if isinstance(tool, str) and tool else None


# --- the analysis ----------------------------------------------------------------------------


def provenance_of(
    tool: Tool[Any, Any],
    arguments: dict[str, Any],
    proposal: ToolProposal,
    sources: ProvenanceSources | None,
) -> dict[str, Any] | None:
    """The analysis for a write or egress call (``None`` for a read, or without sources)."""
    if sources is None or (tool.side_effect is SideEffect.READ and not tool.egress):
        return None
    return analyse(
        arguments,
        cites=list(proposal.source_observation_ids),
        sources=sources,
        resources=tool.resources,
        sensitive=tool.masked_fields,
        credentials=tool.secret_fields,
        destinations=tool.untrusted.destinations,
        content=tool.untrusted.content,
        copied=tool.untrusted.copied,
        replies=tool.untrusted.replies,
        listed=tool.untrusted.listed,
    )


def vouched(found: dict[str, Any], *, pre_approved: bool) -> dict[str, Any]:
    """``found`` once a pre-approval of exactly this proposal vouches for it: what an operator
    approved ahead of time is operator input, so values nobody else supplied (``unseen``) are
    no longer flagged; values found in untrusted content still are (no approval given
    without that fact in view covers them)."""
    if not pre_approved:
        return found
    kept = {
        key: [f for f in found.get(key) or [] if f["origin"] != "unseen"]
        for key in ("flagged", "refused")
    }
    return {**found, **kept}


def refusal(found: dict[str, Any]) -> tuple[Rejection, str] | None:
    """The code and why the call is refused (its flags whose action is ``refuse``: argument
    paths and origins, never the values), or None: ``UNTRUSTED_CONTENT`` when every refused
    flag is a copied value, else ``UNTRUSTED_DESTINATION``."""
    refused = found.get("refused") or []
    if not refused:
        return None
    said = "; ".join(f"{f['argument']} ({f['what']}): {flag_reason(f)}" for f in refused)
    copied = all(f["what"] == "value" for f in refused)
    code = Rejection.UNTRUSTED_CONTENT if copied else Rejection.UNTRUSTED_DESTINATION
    return code, f"not from trusted text: {said}"


def trace_details(found: dict[str, Any]) -> dict[str, Any]:
    """The ``policy.provenance.checked`` event: argument paths only, never their values."""
    flagged = [f["argument"] for f in found["flagged"]]
    refused = [f["argument"] for f in found.get("refused") or []]
    code = None
    if (refused_as := refusal(found)) is not None:
        code = refused_as[0].value
    elif flagged:
        code = Rejection.UNTRUSTED_ARGUMENT.value
    return {
        "cites": found["cites"],
        "cites_untrusted": found["cites_untrusted"],
        "flagged": flagged,
        "refused": refused,
        "allowed": [f["argument"] for f in found.get("allowed") or []],
        "origins": {path: o["origin"] for path, o in (found.get("origins") or {}).items()},
        "code": code,
    }


def flag_reason(flag: dict[str, Any]) -> str:
    """Where a flagged or refused value came from, in words (no value shown)."""
    if flag.get("said") == "private":
        return f"carries the user's private {flag.get('field')}, which the user did not ask to send"
    if flag["what"] == "disclosed":
        what = {
            "resource": "a resource nobody named",
            "too-much": "more of the run's data than the check reads",
        }.get(str(flag.get("said")), f"what {flag['observation_id']} said")
        if not flag["to"][0]:
            return f"carries {what} in a URL beyond the part trusted text names"
        return f"carries {what} to a destination only the author of {flag['to'][0]} vouches for"
    if flag["origin"] == "untrusted":
        return f"found only in untrusted content {flag['observation_id']}"
    return "in nothing the user, a trusted tool or any observation of the run said"


@dataclass(frozen=True)
class _Text:
    """The run's text, folded once for matching (:func:`~warrant.runner.mentions.fold`)."""

    trusted: str
    untrusted: list[tuple[str, str, str]]
    vouched: list[tuple[str, str, str, str]] = field(default_factory=list)
    """``(item_id, text, folded, named_as)`` of the items whose author the user named."""
    pages: frozenset[str] = frozenset()
    """The vouched items that are pages (their author a URL): they vouch for no link."""
    documents: frozenset[str] = frozenset()
    """The vouched items that vouch for no destination (``Attribution.destinations``)."""
    authors: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(kind, folded author)`` -> the first item it wrote (authors a reply may go to)."""
    urls: tuple[str, ...] = ()
    """The URLs trusted text names (:func:`~warrant.runner.mentions.url_key`)."""
    listed: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(kind, folded value)`` -> the observation that listed it (identifiers only, for a
    tool that takes listed destinations)."""

    def origin(
        self, candidate: str, *, kind: ResourceKind | None = None, destination: bool = False
    ) -> dict[str, Any]:
        """The origin of one candidate value: ``trusted``, ``author`` (a destination of
        ``kind``: an item's author, as the service reports it), ``vouched`` (in an item whose
        author the user named; :data:`MIN_VOUCHED_CHARS` characters or more), ``untrusted``
        (with the observation and an excerpt) or ``unseen``."""
        if find(candidate, self.trusted):
            return {"origin": "trusted"}
        key = None if kind is None else (kind.value, fold(candidate.strip()))
        if key is not None and key in self.listed:
            return {"origin": "listed", "observation_id": self.listed[key]}
        item = None if key is None else self.authors.get(key)
        if item is not None:
            return {"origin": "author", "observation_id": item}
        if len(candidate.strip()) >= MIN_VOUCHED_CHARS:
            for item_id, _, folded, named in self.vouched:
                if kind is ResourceKind.URL and item_id in self.pages:
                    continue  # a page the user named is read, its links are not followed
                if destination and item_id in self.documents:
                    continue  # a bill the user named is read, not whoever it says to pay
                if find(candidate, folded):
                    return {"origin": "vouched", "observation_id": item_id, "named_as": named}
        for oid, text, folded in self.untrusted:
            match = find(candidate, folded)
            if match is not None:
                start = max(0, match.start() - EXCERPT_CHARS)
                end = min(len(text), match.end() + EXCERPT_CHARS)
                return {"origin": "untrusted", "observation_id": oid, "excerpt": text[start:end]}
        return {"origin": "unseen"}


#: A value an item vouches for (a named person wrote it) is at least this long: a short
#: number in such an item (a time, a count) vouches for no identifier.
MIN_VOUCHED_CHARS = 6


def _text_of(sources: ProvenanceSources, *, replies: bool, listed: bool = False) -> _Text:
    authors: dict[tuple[str, str], str] = {}
    for item_id, author, kind in sources.authors if replies else ():
        authors.setdefault((kind, fold(author.strip())), item_id)
    return _Text(
        trusted=fold("\n".join(sources.trusted)),
        untrusted=[(oid, t, fold(t)) for oid, t in sources.untrusted],
        vouched=[(i, t, fold(t), n) for i, _, t, n in sources.items if n is not None],
        pages=frozenset(i for i, a, _, n in sources.items if n is not None and split_urls(a)[0]),
        documents=sources.documents,
        authors=authors,
        urls=tuple(url_key(u) for text in sources.trusted for u in split_urls(text)[0]),
        listed={
            (kind, fold(value.strip())): oid
            for oid, kind, value in reversed(sources.listed if listed else ())
            if kind == ResourceKind.IDENTIFIER.value
        },
    )


def analyse(
    arguments: dict[str, Any],
    *,
    cites: list[str],
    sources: ProvenanceSources,
    resources: Mapping[str, ResourceKind],
    sensitive: frozenset[str] = frozenset(),
    credentials: frozenset[str] = frozenset(),
    destinations: FlagAction = FlagAction.REFUSE,
    content: FlagAction = FlagAction.ASK,
    copied: FlagAction = FlagAction.REFUSE,
    replies: bool = False,
    listed: bool = False,
) -> dict[str, Any]:
    """What the proposal cites, each argument value's origin, and which values are flagged
    (asked), refused or allowed by the tool's policy (``replies``: a destination may be an
    item's author, ``UntrustedPolicy.replies``; ``listed``: an identifier a listing named is
    a destination, ``UntrustedPolicy.listed``)."""
    text = _text_of(sources, replies=replies, listed=listed)
    origins: dict[str, dict[str, Any]] = {}
    by_action: dict[FlagAction, list[dict[str, Any]]] = {a: [] for a in FlagAction}
    checked: dict[str, str] = {}  # destinations the disclosure check reads: path -> item id
    unnamed: dict[str, str] = {}  # URL destinations: path -> the part trusted text did not name
    for path, value in leaf_strings(arguments):
        kind = resource_kind(resources, path)
        origin, typed = _leaf_origin(
            path, value, kind, text, sensitive=sensitive, credentials=credentials
        )
        origins[path] = origin
        flag = origin.get("flag")
        if flag is not None:
            action = _action(flag, typed, destinations, content, copied, sources.whole_context)
            by_action[action].append(flag)
            continue
        if kind is ResourceKind.URL and (rest := _unnamed_part(value, origin, text, sources)):
            unnamed[path] = rest
        if _checked(kind, origin) or path in unnamed:
            checked[path] = origin.get("observation_id") or ""
    if checked:  # whoever vouched for a destination vouches for it, not for what others said
        for flag in disclosures(
            arguments,
            replied=checked,
            unnamed=unnamed,
            pointed=frozenset(p for p in checked if origins[p]["origin"] == "vouched"),
            resources=resources,
            sources=sources,
            sensitive=sensitive,
        ):  # the user's own data (a trusted tool's) is asked about; a third party's refused
            by_action[content if flag["origin"] == "trusted-tool" else destinations].append(flag)
    by_action[destinations] += private_disclosures(
        arguments, resources=resources, sources=sources, sensitive=sensitive
    )
    return {
        "cites": cites,
        "cites_untrusted": [c for c in cites if any(c == oid for oid, _ in sources.untrusted)],
        "origins": {p: {k: v for k, v in o.items() if k != "flag"} for p, o in origins.items()},
        "flagged": by_action[FlagAction.ASK],
        "refused": by_action[FlagAction.REFUSE],
        "allowed": by_action[FlagAction.ALLOW],
    }


def _action(
    flag: Mapping[str, Any],
    destination: bool,
    destinations: FlagAction,
    content: FlagAction,
    copied: FlagAction,
    whole_context: bool,
) -> FlagAction:
    """What the tool's policy does with a flag: a destination's (a link taken from untrusted
    content into text is one, and so is a link from nowhere the planner read when the gate
    read all it read: a poisoned memory, a hijacked model), a copied value's, or the content
    rule's (a link or address an agent with its own loop wrote: it read more than the run)."""
    if destination or (
        flag["what"] == "embedded" and (flag["origin"] == "untrusted" or whole_context)
    ):
        return destinations
    return copied if flag["what"] == "value" and flag["origin"] == "untrusted" else content


def _checked(kind: ResourceKind | None, origin: Mapping[str, Any]) -> bool:
    """Is this leaf a destination (typed, or an address in free text) that an item's author
    or a named item vouches for? Its call is then read for disclosure. A plain value copied
    from a named item goes nowhere by itself."""
    vouched = origin["origin"] in ("author", "vouched")
    return vouched and (kind is not None or origin.get("what") != "value")


def _leaf_origin(
    path: str,
    value: str,
    kind: ResourceKind | None,
    text: _Text,
    *,
    sensitive: frozenset[str],
    credentials: frozenset[str],
) -> tuple[dict[str, Any], bool]:
    """One argument leaf's origin (with its flag, if any), and whether it is a destination
    or credential (else content)."""
    top = top_argument(path)
    shown = "<sensitive>" if top in sensitive else value[:200]
    checks: list[tuple[str, str, ResourceKind | None]]
    if kind is not None or top in credentials:
        what = "destination" if kind is not None else "credential"
        checks = [(what, c, kind) for c in _destination_candidates(value, kind, text)]
        return _worst(path, shown, checks, text), True
    checks = [("embedded", c, k) for k, c in _embedded_candidates(value, text)]
    if len(value.strip()) >= MIN_CHARS:
        checks.append(("value", value.strip(), None))
    return _worst(path, shown, checks, text), False


def _unnamed_part(
    value: str, origin: Mapping[str, Any], text: _Text, sources: ProvenanceSources
) -> str:
    """The part of a URL destination beyond the longest URL that names it (in trusted text,
    or in the item that vouched for it): content, checked for disclosure like any payload
    (a host the goal names is no licence to carry a password in the query)."""
    key = url_key(value)
    named = list(text.urls)
    if origin.get("origin") == "vouched":
        item = next((t for i, _, t, _ in sources.items if i == origin["observation_id"]), "")
        named += [url_key(u) for u in split_urls(item)[0]]
    best = ""
    for url in named:
        if len(url) > len(best) and (key == url or key.startswith((f"{url}/", f"{url}?"))):
            best = url
    if not best:
        scheme, _, rest = key.partition("//")
        best = f"{scheme}//{rest.split('/', 1)[0].split('?', 1)[0]}"
    return key[len(best) :].strip("/?#&")


def _worst(
    path: str, shown: str, checks: list[tuple[str, str, ResourceKind | None]], text: _Text
) -> dict[str, Any]:
    """A value's origin: trusted only if every candidate in it is; else its first untrusted or
    unseen candidate, with the flag to raise. A ``value`` check (a whole free-text value) flags
    only a copy from untrusted content: text the model wrote itself is not suspect. A value
    found in a vouched item, or a destination that is an item's author, passes as such."""
    if not checks:
        return {"origin": "unchecked"}
    passed: dict[str, Any] | None = None
    for what, candidate, kind in checks:
        found = text.origin(
            candidate, kind=kind if what != "credential" else None, destination=what != "value"
        )
        origin = found["origin"]
        if origin == "trusted" or (what == "value" and origin == "unseen"):
            continue
        if origin in ("vouched", "author", "listed"):
            passed = passed or ({**found, "what": what} if what == "value" else found)
            continue
        flag = {
            "argument": path,
            "value": shown,
            "what": what,
            "origin": origin,
            "observation_id": found.get("observation_id"),
            "excerpt": found.get("excerpt"),
        }
        return {**found, "what": what, "flag": flag}
    if passed is not None:
        return passed
    if all(what == "value" for what, _, _ in checks):
        return {"origin": "unchecked"}
    return {"origin": "trusted"}


def _destination_candidates(value: str, kind: ResourceKind | None, text: _Text) -> list[str]:
    """What must be trusted of a destination (:func:`warrant.runner.mentions.
    destination_candidates`)."""
    return destination_candidates(value, kind, lambda v: text.origin(v)["origin"] == "trusted")


def _embedded_candidates(value: str, text: _Text) -> list[tuple[ResourceKind, str]]:
    found = []
    for kind, item in embedded_values(value):
        found += [(kind, c) for c in _destination_candidates(item, kind, text)]
    return found
