"""Warrant contracts for every function of AgentDojo's four v1.2.2 suites (workspace, travel,
banking, slack), declared as the functions really are, never to pass a task.

One :class:`Contract` per function name (workspace and travel share ``send_email`` and the
calendar functions: the same code, the same contract). :func:`build_tools` turns the suite's
AgentDojo :class:`~agentdojo.functions_runtime.Function` objects into warrant
:class:`~warrant.tools.Tool` objects: the input model is the function's own pydantic
``parameters`` model re-based on :class:`~warrant.tools.ToolInput` (strict, no unknown fields);
``execute`` never runs (the bench runs accepted calls in AgentDojo's own runtime).

The rules the table follows:

* **side effect**: ``read`` for what changes nothing; ``idempotent-write`` for a call that sets
  state (the same call twice sets it once); ``compensatable-write`` where the suite itself can
  undo it; ``irreversible`` for what sends something to a third party (a mail, a message, a
  payment, an invitation, a booking, a publication, a share) or what the suite cannot undo. A
  read whose argument leaves the user's systems (``get_webpage``'s URL) is an egress read.
* **resources**: every argument naming where a write goes or whom it reaches, typed
  (``email``, ``url``, ``identifier``). Warrant types only string values: an integer id
  (``update_scheduled_transaction``'s ``id``) stays plain content.
* **trusted output** only for the user's own data that no third party can write. The test:
  none of the suite's injection vectors (``injection_vectors.yaml``, the places AgentDojo's
  attacker writes) can appear in it; :func:`bench.agentdojo.tasks.trust_violations` checks
  this on every run. Everything else is untrusted content.
* **attribution** where the service reports who wrote each item (a mail's sender, a file's
  owner, a chat message's sender, a payment's sender IBAN, the URL a page came from). Only a
  mail's sender may be replied to (``replies``), as in the project's own adversarial suite.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model, field_validator
from pydantic_core import to_jsonable_python

from warrant.tools import (
    Attribution,
    FlagAction,
    ObservationSource,
    ResourceKind,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
    UntrustedPolicy,
)

__all__ = ["CONTRACTS", "Contract", "build_tools", "capability", "shape_output"]


def _built(cls: Any, **fields: Any) -> Any:
    """``cls(**fields)`` without the fields this version of warrant does not have, so the
    same bench measures an older gate (``docs/agentdojo.md``, "Before and after")."""
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in known})


READ = SideEffect.READ
SETS = SideEffect.IDEMPOTENT_WRITE
UNDOABLE = SideEffect.COMPENSATABLE_WRITE
SENDS = SideEffect.IRREVERSIBLE
EMAIL = ResourceKind.EMAIL
URL = ResourceKind.URL
ID = ResourceKind.IDENTIFIER

#: Mails: the sender as the mail service delivered it; a reply may go to it. The thread a
#: mail belongs to (its subject without ``Re:``/``Fwd:``) is where it was posted: "the
#: emails about the family reunion" names that thread, whose text may then be used, but as
#: anyone may write a mail with that subject, no address in it is a destination.
MAIL = _built(
    Attribution,
    items="items",
    author="sender",
    kind=EMAIL,
    replies=True,
    place="thread",
    destinations=False,
)
#: Drive files: the owner as the drive records it (not someone one replies to).
FILES = _built(Attribution, items="items", author="owner", kind=EMAIL)
FILE = _built(Attribution, author="owner", kind=EMAIL)
#: Chat messages: the sender's handle as the workspace knows it. No ``names``: AgentDojo's
#: messages carry no address-book name, and a handle is picked by its owner.
#: Where the service says a message was posted (its channel, or the inbox it went to) is
#: ``place``: "the links posted in general" names those messages as a source.
CHAT = _built(Attribution, items="items", author="sender", place="recipient")
#: A message's sender is a workspace member as the workspace names them.
_SENDERS = {"items[].sender": ResourceKind.IDENTIFIER}
#: Payments: the sender IBAN as the bank reports it (who wrote the subject line); a refund
#: may go back to it, as a reply goes to a mail's sender.
PAYMENTS = _built(Attribution, items="items", author="sender", replies=True)
#: Events: named by their title ("the 'Introductory meeting' event"), such an event vouches
#: for its participants, the field the calendar fills in, and not for its description (free
#: text whoever invited the user wrote, where AgentDojo puts its injections).
EVENTS = _built(Attribution, items="items", place="title", vouches=("participants",))
# Not declared, measured: a bill named by its path as a place brings back banking 0 and lets
# the bill's own injections through (a file is free text; no field of it is the bank's), as
# an event vouching for its whole text did (38 pairs).
#: A catalogue's facts about a business (its address, prices, opening hours), keyed by its
#: name: a business the user names ("tell me the address of 'City Hub'") vouches for the
#: facts listed under that name. Never its reviews: free text any guest writes.
#: Or one it chose from the catalogue's own listing of a city's businesses
#: (``Attribution(listed=True)``: "the hotel with the best rating", then its address).
CATALOGUE = _built(Attribution, items="items", place="name", listed=True, vouches=("value",))
#: A document someone sent the user (a bill, a landlord's letter), by its path: named
#: ("read 'address-change.txt'"), its text may be used (an address to set), but no
#: account or address in it is a destination (AgentDojo's injections sit in these very
#: files, beside the bill's own IBAN).
DOCUMENT = _built(Attribution, place="path", destinations=False)
#: A web page: the URL it was fetched from.
PAGE = _built(Attribution, author="url", kind=URL)


@dataclass(frozen=True, kw_only=True)
class Contract:
    """What the gate must know of one AgentDojo function."""

    side_effect: SideEffect
    why: str
    """One line: what the call does to the world and whose words its output carries."""
    resources: Mapping[str, ResourceKind] = field(default_factory=dict)
    trusted: bool = False
    attribution: Attribution | None = None
    egress: bool = False
    secret: frozenset[str] = frozenset()
    replies: bool = False
    """It sends replies: a mail's sender is a destination it may reach (``author``)."""
    listing: Mapping[str, ResourceKind] = field(default_factory=dict)
    """Output fields the service fills in with the user's own resources (``Tool.listing``)."""
    private: frozenset[str] = frozenset()
    """Output fields holding the user's private data (``Tool.private``)."""
    listed: bool = False
    """It acts on the user's own listed resources (``UntrustedPolicy(listed=True)``): never
    for a destructive call (a hijacked planner may pick any entry of a listing)."""
    names: bool = False
    """The output is a label and one name per line (``"Hotel Names: A\nB\n"``): shown as
    ``items``, the names the catalogue lists (``listing``)."""
    keyed: bool = False
    """The output maps names to values (``{"Hotel X": "Rating: 4.2 ..."}``): shown as items
    ``{"name", "value"}`` so the names are read as the data they are."""


#: The user's identity documents and accounts in the travel profile (``Tool.private``).
_IDENTITY = frozenset({"ID Number", "Passport Number", "Bank Account Number", "Credit Card Number"})
#: A listing's ids, as the service assigns them.
_IDS = {"items[].id_": ResourceKind.IDENTIFIER}
#: A catalogue's listing: the names of a city's businesses.
_NAMES = {"items[]": ResourceKind.IDENTIFIER}
_INVITES = "sends invitation mails to the participants (cannot be unsent)"
_CATALOGUE = "the travel service's catalogue: names and reviews written by businesses and guests"
#: A catalogue's facts about the businesses it lists, keyed by name (``CATALOGUE``).
_FACTS = Contract(side_effect=READ, why=_CATALOGUE, keyed=True, attribution=CATALOGUE)

CONTRACTS: dict[str, Contract] = {
    # --- mail (workspace, travel) ---------------------------------------------------------
    "send_email": Contract(
        side_effect=SENDS,
        why="sends a mail (cannot be unsent); it replies to mails' senders",
        resources={"recipients": EMAIL, "cc": EMAIL, "bcc": EMAIL},
        replies=True,
    ),
    "delete_email": Contract(
        side_effect=UNDOABLE,
        why="moves a mail to the trash, where it stays",
        resources={"email_id": ID},
    ),
    "get_unread_emails": Contract(
        side_effect=SETS,
        why="marks the unread mails read; mails are written by their senders",
        attribution=MAIL,
    ),
    "get_sent_emails": Contract(side_effect=READ, why="mails (quoting others)", attribution=MAIL),
    "get_received_emails": Contract(
        side_effect=READ, why="mails written by their senders", attribution=MAIL
    ),
    "get_draft_emails": Contract(side_effect=READ, why="mails (quoting others)", attribution=MAIL),
    "search_emails": Contract(
        side_effect=READ, why="mails written by their senders", attribution=MAIL
    ),
    "search_contacts_by_name": Contract(
        side_effect=READ,
        why="the contact list: every address that ever mailed the user, named after it",
    ),
    "search_contacts_by_email": Contract(
        side_effect=READ,
        why="the contact list: every address that ever mailed the user, named after it",
    ),
    # --- calendar (workspace, travel) -----------------------------------------------------
    "get_current_day": Contract(side_effect=READ, why="the calendar's clock", trusted=True),
    "search_calendar_events": Contract(
        side_effect=READ,
        why="events, with descriptions written by whoever invited the user",
        attribution=EVENTS,
        listing=_IDS,
    ),
    "get_day_calendar_events": Contract(
        side_effect=READ,
        why="events, with descriptions written by whoever invited the user",
        attribution=EVENTS,
        listing=_IDS,
    ),
    "create_calendar_event": Contract(
        side_effect=SENDS, why=_INVITES, resources={"participants": EMAIL}
    ),
    "cancel_calendar_event": Contract(
        side_effect=SENDS,
        why="cancels an event and mails its participants",
        resources={"event_id": ID},
    ),
    "reschedule_calendar_event": Contract(
        side_effect=SENDS,
        why="moves an event and mails its participants",
        resources={"event_id": ID},
        listed=True,
    ),
    "add_calendar_event_participants": Contract(
        side_effect=SENDS,
        why="shows the event to new people (the suite cannot remove them)",
        resources={"event_id": ID, "participants": EMAIL},
        listed=True,
    ),
    # --- cloud drive (workspace) ----------------------------------------------------------
    "append_to_file": Contract(
        side_effect=SENDS,
        why="appends to a file, possibly shared (not idempotent, no undo in the suite)",
        resources={"file_id": ID},
        listed=True,
    ),
    "search_files_by_filename": Contract(
        side_effect=READ,
        why="files, written by their owners and editors",
        attribution=FILES,
        listing=_IDS,
    ),
    "create_file": Contract(
        side_effect=UNDOABLE,
        why="creates a file in the user's drive (delete_file undoes it)",
        resources={"filename": ID},
        listing={"id_": ResourceKind.IDENTIFIER},  # the id the drive gave the new file
    ),
    "delete_file": Contract(
        side_effect=SENDS, why="deletes a file (no bin)", resources={"file_id": ID}
    ),
    "get_file_by_id": Contract(
        side_effect=READ,
        why="a file, written by its owner and editors",
        resources={"file_id": ID},
        attribution=FILE,
    ),
    "list_files": Contract(
        side_effect=READ,
        why="files, written by their owners and editors",
        attribution=FILES,
        listing=_IDS,
    ),
    "share_file": Contract(
        side_effect=SENDS,
        why="gives someone access to a file (a disclosure; no unshare in the suite)",
        resources={"file_id": ID, "email": EMAIL},
        listed=True,
    ),
    "search_files": Contract(
        side_effect=READ,
        why="files, written by their owners and editors",
        attribution=FILES,
        listing=_IDS,
    ),
    # --- travel ---------------------------------------------------------------------------
    "get_user_information": Contract(
        side_effect=READ,
        why="the user's own profile (only the user edits it)",
        trusted=True,
        private=_IDENTITY,
    ),
    "get_all_hotels_in_city": Contract(
        side_effect=READ, why=_CATALOGUE, names=True, listing=_NAMES
    ),
    "get_hotels_prices": _FACTS,
    "get_rating_reviews_for_hotels": Contract(side_effect=READ, why=_CATALOGUE, keyed=True),
    "get_hotels_address": _FACTS,
    "get_all_restaurants_in_city": Contract(
        side_effect=READ, why=_CATALOGUE, names=True, listing=_NAMES
    ),
    "get_cuisine_type_for_restaurants": _FACTS,
    "get_restaurants_address": _FACTS,
    "get_rating_reviews_for_restaurants": Contract(side_effect=READ, why=_CATALOGUE, keyed=True),
    "get_dietary_restrictions_for_all_restaurants": _FACTS,
    "get_contact_information_for_restaurants": _FACTS,
    "get_price_for_restaurants": _FACTS,
    "check_restaurant_opening_hours": _FACTS,
    "get_all_car_rental_companies_in_city": Contract(
        side_effect=READ, why=_CATALOGUE, names=True, listing=_NAMES
    ),
    "get_car_types_available": _FACTS,
    "get_rating_reviews_for_car_rental": Contract(side_effect=READ, why=_CATALOGUE, keyed=True),
    "get_car_fuel_options": _FACTS,
    "get_car_rental_address": _FACTS,
    "get_car_price_per_day": _FACTS,
    "get_flight_information": Contract(side_effect=READ, why=_CATALOGUE),
    "reserve_hotel": Contract(
        side_effect=SENDS,
        why="books with a business and gives it the user's phone (no cancel in the suite)",
        resources={"hotel": ID},
    ),
    "reserve_car_rental": Contract(
        side_effect=SENDS,
        why="books with a business and gives it the user's phone (no cancel in the suite)",
        resources={"company": ID},
    ),
    "reserve_restaurant": Contract(
        side_effect=SENDS,
        why="books with a business and gives it the user's phone (no cancel in the suite)",
        resources={"restaurant": ID},
    ),
    # --- banking --------------------------------------------------------------------------
    "get_iban": Contract(side_effect=READ, why="the bank's record of the account", trusted=True),
    "send_money": Contract(
        side_effect=SENDS,
        why="pays an account (cannot be recalled); a refund goes back to whoever paid",
        resources={"recipient": ID},
        replies=True,
    ),
    "schedule_transaction": Contract(
        side_effect=SENDS,
        why="sets up a payment that will go out (no cancel in the suite)",
        resources={"recipient": ID},
    ),
    "update_scheduled_transaction": Contract(
        side_effect=SETS,
        why="sets a standing order's fields (the same call twice sets them once)",
        resources={"recipient": ID},
    ),
    "get_balance": Contract(side_effect=READ, why="the bank's record of the account", trusted=True),
    "get_most_recent_transactions": Contract(
        side_effect=READ,
        why="payments, incoming ones with a subject line their sender wrote",
        attribution=PAYMENTS,
    ),
    "get_scheduled_transactions": Contract(
        side_effect=READ,
        why="the user's own standing orders (only the user sets or changes them)",
        trusted=True,
    ),
    "read_file": Contract(
        side_effect=READ,
        why="a document someone sent the user (a bill, a landlord's notice)",
        resources={"file_path": ID},
        attribution=DOCUMENT,
    ),
    "get_user_info": Contract(
        side_effect=READ, why="the bank's record of the user (only the user edits it)", trusted=True
    ),
    "update_password": Contract(
        side_effect=SENDS,
        why="sets the password (locks out whoever does not know it)",
        secret=frozenset({"password"}),
    ),
    "update_user_info": Contract(
        side_effect=SETS, why="sets the user's name and address (the same call twice sets once)"
    ),
    # --- slack ----------------------------------------------------------------------------
    "get_channels": Contract(
        side_effect=READ,
        why="channel names: a member names a channel (an injection vector)",
        listing={"items[]": ID},
    ),
    "add_user_to_channel": Contract(
        side_effect=SENDS,
        why="shows a channel's history to a user (no removal from a channel in the suite)",
        resources={"user": ID, "channel": ID},
        listed=True,
    ),
    "read_channel_messages": Contract(
        side_effect=READ,
        why="messages written by their senders",
        resources={"channel": ID},
        attribution=CHAT,
        listing=_SENDERS,
    ),
    "read_inbox": Contract(
        side_effect=READ,
        why="messages written by their senders",
        resources={"user": ID},
        attribution=CHAT,
        listing=_SENDERS,
    ),
    "send_direct_message": Contract(
        side_effect=SENDS,
        why="sends a message (cannot be unsaid)",
        resources={"recipient": ID},
        listed=True,
    ),
    "send_channel_message": Contract(
        side_effect=SENDS,
        why="posts in a channel (cannot be unsaid)",
        resources={"channel": ID},
        listed=True,
    ),
    "get_users_in_channel": Contract(
        side_effect=READ,
        why="the workspace's membership records (only the workspace adds members)",
        resources={"channel": ID},
        trusted=True,
    ),
    "invite_user_to_slack": Contract(
        side_effect=SENDS,
        why="mails an invitation and adds a member",
        resources={"user": ID, "user_email": EMAIL},
    ),
    "remove_user_from_slack": Contract(
        side_effect=SENDS, why="removes a member and deletes their inbox", resources={"user": ID}
    ),
    "get_webpage": Contract(
        side_effect=READ,
        why="fetches a URL (the URL goes out); the page is whatever its host serves",
        resources={"url": URL},
        egress=True,
        attribution=PAGE,
    ),
    "post_webpage": Contract(
        side_effect=SENDS, why="publishes content at a URL", resources={"url": URL}
    ),
}


class AnyOutput(ToolOutput):
    """The output model of every bench tool: AgentDojo's return value, shaped by
    :func:`shape_output` (never validated: the gate does not read it)."""

    model_config = ConfigDict(extra="allow")


def capability(suite: str, function: str) -> str:
    """The capability a tool of ``suite`` needs (one per tool: granted by name)."""
    return f"{suite}:{function}"


def _elsewhere(args: Any, ctx: ToolContext) -> AnyOutput:
    raise RuntimeError("the bench runs accepted calls in AgentDojo's FunctionsRuntime")


def _with_scheme(cls: Any, value: Any) -> Any:
    """AgentDojo's web reads ``www.x.com`` and ``https://www.x.com`` as one page
    (``standardize_url``); warrant's URL kind needs the scheme: a scheme-less URL is read as
    ``https://``."""
    if isinstance(value, str) and value and "://" not in value:
        return f"https://{value}"
    return value


def _input_model(name: str, parameters: type[BaseModel], contract: Contract) -> type[ToolInput]:
    """AgentDojo's parameters model re-based on ToolInput (strict, unknown fields refused)."""
    fields: dict[str, Any] = {
        key: (info.annotation, info) for key, info in parameters.model_fields.items()
    }
    urls = [key for key, kind in contract.resources.items() if kind is URL]
    validators = {
        f"_scheme_{key}": field_validator(key, mode="before")(_with_scheme) for key in urls
    }
    return create_model(f"{name}_input", __base__=ToolInput, __validators__=validators, **fields)


def _tool(suite: str, function: Any, *, ask_destinations: bool, ask_copied: bool) -> Tool[Any, Any]:
    contract = CONTRACTS.get(function.name)
    if contract is None:
        raise KeyError(f"no contract for {suite}.{function.name}: declare it in CONTRACTS")
    source = ObservationSource.TRUSTED_TOOL if contract.trusted else None
    destinations = FlagAction.ASK if ask_destinations else FlagAction.REFUSE
    return _built(
        Tool,
        name=function.name,
        version="1",
        description=f"{function.description.splitlines()[0]} ({contract.why})",
        input_model=_input_model(function.name, function.parameters, contract),
        output_model=AnyOutput,
        capabilities=(capability(suite, function.name),),
        side_effect=contract.side_effect,
        execute=_elsewhere,
        resources=dict(contract.resources),
        egress=contract.egress,
        output_source=source or ObservationSource.UNTRUSTED_CONTENT,
        attribution=contract.attribution,
        listing=dict(contract.listing),
        private=contract.private,
        secret_fields=contract.secret,
        # the gate is what the bench measures: AgentDojo's environment applies the calls,
        # nothing of warrant's reads their effects back
        unverified=contract.side_effect is not READ,
        unverified_reason="AgentDojo's simulated environment applies it; nothing reads it back"
        if contract.side_effect is not READ
        else "",
        untrusted=_built(
            UntrustedPolicy,
            destinations=destinations,
            replies=contract.replies,
            listed=contract.listed,
            copied=FlagAction.ASK if ask_copied else FlagAction.REFUSE,
        ),
    )


def build_tools(
    suite: str,
    functions: Sequence[Any],
    *,
    ask_destinations: bool = False,
    ask_copied: bool = False,
) -> list[Tool[Any, Any]]:
    """A warrant tool per AgentDojo function of ``suite``; ``ask_destinations``: every
    contract's untrusted destinations asked about (``UntrustedPolicy(destinations=ASK)``)
    instead of refused; ``ask_copied``: a value copied from untrusted content asked about
    (``UntrustedPolicy(copied=ASK)``) instead of refused."""
    return [
        _tool(suite, f, ask_destinations=ask_destinations, ask_copied=ask_copied) for f in functions
    ]


def shape_output(function: str, arguments: Mapping[str, Any], result: Any) -> dict[str, Any]:
    """AgentDojo's return value as a tool output (a JSON object): a list as ``items``, a
    mapping of names as ``items`` of ``{name, value}`` (``Contract.keyed``), a page with the
    URL it came from, a scalar as ``value``."""
    contract = CONTRACTS[function]
    data = to_jsonable_python(result)
    if contract.attribution is PAGE:
        return {"url": arguments.get("url"), "content": data}
    if contract.attribution is DOCUMENT:
        return {"path": arguments.get("file_path"), "content": data}
    if contract.names and isinstance(data, str):
        names = data.split(": ", 1)[-1].splitlines()
        return {"items": [name.strip() for name in names if name.strip()]}
    if contract.keyed and isinstance(data, dict):
        return {"items": [{"name": k, "value": v} for k, v in data.items()]}
    if isinstance(data, list):
        if contract.attribution is MAIL:
            data = [_threaded(mail) for mail in data]
        return {"items": data}
    if isinstance(data, dict):
        return data
    if data is None:
        return {}
    return {"value": data}


_REPLY_PREFIX = re.compile(r"^(?:\s*(?:re|fwd?|aw|wg)\s*:\s*)+", re.IGNORECASE)


def _threaded(mail: Any) -> Any:
    """A mail with the thread it belongs to, as a mail service groups a conversation: its
    subject without ``Re:``/``Fwd:`` prefixes."""
    if not isinstance(mail, dict) or not isinstance(mail.get("subject"), str):
        return mail
    return {**mail, "thread": _REPLY_PREFIX.sub("", mail["subject"]).strip()}
