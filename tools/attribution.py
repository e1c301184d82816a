"""Attribution: which field of an untrusted tool's output says who wrote each item, as the
service reports it (not as the author claims it).

A mail's sender address as the mail service delivered it, a chat message's author as the
workspace knows them, the URL a page was fetched from: a third party chose the *words* of the
item, but not these fields. The provenance layer uses them two ways
(:mod:`warrant.runner.provenance`):

* an item whose author the user **named** (the goal or a person's answer says the
  author's address, URL or one of the ``names`` the service knows them by) is a source the
  user vouched for: its values count as trusted, and are shown as ``vouched``;
* an item's author is a destination the service vouches for (reply to a mail's sender, when
  ``reply_kind`` says so): it passes as ``author``, but a call that carries what another item
  or observation said to it is refused (``disclosed``).
"""

from __future__ import annotations

__layer__ = "pure core"

from dataclasses import dataclass

from warrant.runner.scopes import ResourceKind

__all__ = ["Attribution"]


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """Where, in a tool's output, the items are and who wrote each one.

    ``Attribution(items="messages", author="sender", names=("sender_name",),
    reply_kind=ResourceKind.EMAIL)``: the output's ``messages`` list, each message's
    ``sender`` authenticated by the mail service, ``sender_name`` the name the user's address
    book gives that sender (a name the sender cannot choose), and a reply may go to the
    sender. ``Attribution(author="url")``: the whole output is one item, its author the URL it
    was fetched from (named by the goal, never replied to)."""

    author: str
    """The field of each item that says who wrote it, as the service reports it."""
    items: str = ""
    """The output's field holding the list of items (dotted for nested); ``""``: the whole
    output is one item."""
    names: tuple[str, ...] = ()
    """Fields of each item naming the author in words the service, not the author, chose
    (a contact's name from the user's address book). Never a display name the sender sets."""
    reply_kind: ResourceKind | None = None
    """The kind of destination an item's author may be (``ResourceKind.EMAIL``: a reply to a
    mail's sender), matched only against destinations of that kind; ``None`` (the default):
    never a destination (a chat handle its owner picked, the URL a page was fetched from)."""

    def describe(self) -> dict[str, object]:
        """For the tool's published contract (``Tool.describe``)."""
        return {
            "author": self.author,
            "items": self.items,
            "names": list(self.names),
            "replyKind": self.reply_kind.value if self.reply_kind else None,
        }

    def __post_init__(self) -> None:
        if not self.author or any(not n for n in self.names):
            raise ValueError("Attribution: author and names must be field names")
