"""Attribution: which field of an untrusted tool's output says who wrote each item, as the
service reports it (not as the author claims it).

A mail's sender address as the mail service delivered it, a chat message's author as the
workspace knows them, the URL a page was fetched from: a third party chose the *words* of the
item, but not these fields. The provenance layer uses them two ways
(:mod:`warrant.runner.provenance`):

* an item whose author the user **named** (the goal, the spec or a person's answer says the
  author's address, URL or one of the ``names`` the service knows them by) is a source the
  user vouched for: its values count as trusted, and are shown as ``vouched``;
* an item's author is a destination the service vouches for (reply to a mail's sender): it
  passes as ``author``, but nothing another item said may be sent to it without a person
  (``disclosed``).
"""

from __future__ import annotations

__layer__ = "pure core"

from dataclasses import dataclass

__all__ = ["Attribution"]


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """Where, in a tool's output, the items are and who wrote each one.

    ``Attribution(items="messages", author="sender", names=("sender_name",))``: the output's
    ``messages`` list, each message's ``sender`` authenticated by the mail service, and
    ``sender_name`` the name the user's address book gives that sender (a name the sender
    cannot choose). ``Attribution(author="url", replies=False)``: the whole output is one item,
    its author the URL it was fetched from (named by the goal, never replied to)."""

    author: str
    """The field of each item that says who wrote it, as the service reports it."""
    items: str = ""
    """The output's field holding the list of items (dotted for nested); ``""``: the whole
    output is one item."""
    names: tuple[str, ...] = ()
    """Fields of each item naming the author in words the service, not the author, chose
    (a contact's name from the user's address book). Never a display name the sender sets."""
    replies: bool = True
    """May an item's author be a destination (a reply to a mail's sender, a message to a
    chat author)? ``False`` for an author the caller chose (the URL a page was fetched from)."""

    def __post_init__(self) -> None:
        if not self.author or any(not n for n in self.names):
            raise ValueError("Attribution: author and names must be field names")
