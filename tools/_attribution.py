"""Attribution: which field of an untrusted tool's output says who wrote each item, as the
service reports it (not as the author claims it).

A mail's sender address as the mail service delivered it, a chat message's author as the
workspace knows them, the URL a page was fetched from: a third party chose the *words* of the
item, but not these fields. The provenance layer uses them two ways
(:mod:`warrant.runner.provenance`):

* an item whose author the user **named** (the goal or a person's answer says the
  author's address, URL or one of the ``names`` the service knows them by) is a source the
  user vouched for: its values count as trusted, and are shown as ``vouched``;
* an item's author is a destination the service vouches for (a reply to a mail's sender, when
  ``replies`` says so and the sending tool's ``UntrustedPolicy(replies=True)`` too): it passes
  as ``author``, but a call that carries what another observation said to it is not
  (``disclosed``).
"""

from __future__ import annotations

__layer__ = "pure core"

from dataclasses import dataclass

from warrant.runner.scopes import ResourceKind

__all__ = ["Attribution"]


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """Where, in a tool's output, the items are and who wrote each one.

    ``Attribution(items="messages", author="sender", kind=ResourceKind.EMAIL,
    names=("sender_name",), replies=True)``: the output's ``messages`` list, each message's
    ``sender`` an e-mail address the mail service authenticated, ``sender_name`` the name the
    user's address book gives that sender (a name the sender cannot choose), and a reply may
    go to the sender. ``Attribution(author="url", kind=ResourceKind.URL)``: the whole output
    is one item, its author the URL it was fetched from (named by the goal, never replied
    to)."""

    author: str
    """The field of each item that says who wrote it, as the service reports it."""
    kind: ResourceKind = ResourceKind.IDENTIFIER
    """What the author is: an ``email`` address or a ``url`` is named by the user's words
    containing it exactly; an ``identifier`` (a handle its owner picked) only through
    ``names``."""
    items: str = ""
    """The output's field holding the list of items (dotted for nested); ``""``: the whole
    output is one item."""
    names: tuple[str, ...] = ()
    """Fields of each item naming the author in words the user, not the author, chose (a
    contact's name from the user's address book). Never a display name the author sets."""
    replies: bool = False
    """May an item's author be a destination (of ``kind``) of a tool that sends replies
    (``UntrustedPolicy(replies=True)``)? A mail's sender: yes. A page's URL, a handle: no."""

    def describe(self) -> dict[str, object]:
        """For the tool's published contract (``Tool.describe``)."""
        return {
            "author": self.author,
            "kind": self.kind.value,
            "items": self.items,
            "names": list(self.names),
            "replies": self.replies,
        }

    def __post_init__(self) -> None:
        if not self.author or any(not n for n in self.names):
            raise ValueError("Attribution: author and names must be field names")
