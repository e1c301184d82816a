"""The fake external services the adversarial suite attacks: mail, payments, account, files.

A real implementation with its own tables (``adv_*``, created by the plug-in's set-up step,
never by the ledger's migrations) so that every effect can be counted afterwards: a mail in
``adv_outbox``, a transfer in ``adv_transfers``, a password change in
``adv_password_changes``, a file write in ``adv_file_writes`` (and on disk). Writes honour
idempotency keys the way payment APIs do (same key and parameters → the same effect; same key,
other parameters → ``IDEMPOTENCY_KEY_REUSED``) and are queryable by key (the tools'
``reconcile``). The web is a real HTTP server (:mod:`tests.adversary.web`) that logs every
request into ``adv_web_requests``.

Faults are switched on per tool and consumed atomically, so a test can inject them into the
worker processes: the demo service's fault injection
(:class:`warrant_demo.service_faults.FaultsService`, its modes and its tables
``demo_faults`` and ``demo_calls``), one fake service's faults for the demo and this suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Table, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from warrant_demo.service import IdempotencyConflict
from warrant_demo.service_faults import FAULT_MODES, Fault, FaultsService

from tests.adversary.tables import (
    accounts,
    chat_channels,
    chat_messages,
    chat_posts,
    config,
    contacts,
    drive_deletions,
    drive_files,
    file_writes,
    inbox,
    metadata,
    outbox,
    password_changes,
    standing_order_updates,
    standing_orders,
    transfers,
    web_requests,
)
from warrant.runner.errors import ToolFailed, ToolRejected

__all__ = ["FAULT_MODES", "AdversaryServices", "Fault", "IdempotencyConflict"]

#: An address as the mail service accepts it: no display name, no comments, one ``@``.
ADDRESS = re.compile(r"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")


def _hash(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _never(**_: Any) -> bool:
    return False


class AdversaryServices(FaultsService):
    """The external systems. ``engine`` points at their database (may share the ledger's)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._ready = False

    def ensure_schema(self) -> None:
        """The plug-in's set-up step: create the ``adv_*`` tables (idempotent)."""
        if not self._ready:
            metadata.create_all(self.engine)
            self._faults_schema()
            self._ready = True

    # --- configuration (what the test process tells the worker processes) -------------------

    def configure(self, **values: str) -> None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            for key, value in values.items():
                conn.execute(
                    pg_insert(config)
                    .values(key=key, value=value)
                    .on_conflict_do_update(index_elements=[config.c.key], set_={"value": value})
                )

    def setting(self, key: str) -> str | None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            return conn.execute(select(config.c.value).where(config.c.key == key)).scalar()

    # --- fault injection (the demo service's: set_fault, clear_faults, call_count) -----------

    def before(
        self, tool: str, key: str | None, is_cancelled: Callable[..., bool] = _never
    ) -> Fault | None:
        """Log the call and apply a pending fault that acts before the service does."""
        return self._before(tool, key, is_cancelled)

    after_commit = staticmethod(FaultsService._after_commit)

    def _idempotent_insert(
        self, table: Table, key: str, params: dict[str, Any], **columns: Any
    ) -> Any:
        """Insert once per key (``params`` and ``columns`` as columns; ``params`` define the
        request); the same key with other parameters is a conflict."""
        digest = _hash(params)
        values = {**params, **columns}
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(table)
                .values(idempotency_key=key, request_hash=digest, **values)
                .on_conflict_do_nothing(index_elements=[table.c.idempotency_key])
            )
            row = conn.execute(select(table).where(table.c.idempotency_key == key)).one()
        if row.request_hash != digest:
            raise IdempotencyConflict("idempotency key reused with other parameters")
        return row

    def _by_key(self, table: Table, key: str) -> Any:
        self.ensure_schema()
        with self.engine.begin() as conn:
            return conn.execute(select(table).where(table.c.idempotency_key == key)).first()

    # --- mail ------------------------------------------------------------------------------

    def deliver(self, mailbox: str, *, sender: str, subject: str, body: str) -> None:
        """Put a message into ``mailbox`` (how the test seeds an inbox)."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(
                insert(inbox).values(mailbox=mailbox, sender=sender, subject=subject, body=body)
            )

    def add_contact(self, mailbox: str, address: str, name: str) -> None:
        """Put ``address`` in ``mailbox``'s address book as ``name`` (the user's own words)."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(contacts)
                .values(mailbox=mailbox, address=address, name=name)
                .on_conflict_do_update(
                    index_elements=[contacts.c.mailbox, contacts.c.address], set_={"name": name}
                )
            )

    def read_inbox(
        self, mailbox: str, *, limit: int, is_cancelled: Callable[..., bool] = _never
    ) -> list[dict[str, Any]]:
        """The messages, each with ``sender_name``: the address book's name for the sender
        (None for a sender the user never saved), as a mail client shows it."""
        self.before("read_inbox", None, is_cancelled)
        known = (contacts.c.mailbox == inbox.c.mailbox) & (contacts.c.address == inbox.c.sender)
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(inbox, contacts.c.name.label("sender_name"))
                .select_from(inbox.outerjoin(contacts, known))
                .where(inbox.c.mailbox == mailbox)
                .order_by(inbox.c.id)
                .limit(limit)
            ).all()
        return [
            {
                "message_id": f"m{r.id}",
                "sender": r.sender,
                "sender_name": r.sender_name,
                "subject": r.subject,
                "body": r.body,
            }
            for r in rows
        ]

    def send_mail(
        self,
        *,
        key: str,
        mailbox: str,
        to: list[str],
        subject: str,
        body: str,
        is_cancelled: Callable[..., bool] = _never,
    ) -> dict[str, Any]:
        bad = [a for a in to if not ADDRESS.match(a)]
        if bad:
            raise ToolRejected(f"not a deliverable address: {bad[0]!r}", code="INVALID_ADDRESS")
        fault = self.before("send_mail", key, is_cancelled)
        params = {"mailbox": mailbox, "recipients": list(to), "subject": subject, "body": body}
        row = self._idempotent_insert(outbox, key, params)
        self.after_commit(fault, "mail")
        return {"message_id": f"out{row.id}", "recipients": list(row.recipients)}

    def sent_mail(self, key: str) -> dict[str, Any] | None:
        row = self._by_key(outbox, key)
        if row is None:
            return None
        return {"message_id": f"out{row.id}", "recipients": list(row.recipients)}

    def outbox(self, mailbox: str) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(outbox).where(outbox.c.mailbox == mailbox).order_by(outbox.c.id)
            ).all()
        return [
            {"recipients": list(r.recipients), "subject": r.subject, "body": r.body} for r in rows
        ]

    # --- payments --------------------------------------------------------------------------

    def transfer(
        self,
        *,
        key: str,
        account: str,
        iban: str,
        amount_cents: int,
        currency: str,
        reference: str,
        is_cancelled: Callable[..., bool] = _never,
    ) -> dict[str, Any]:
        fault = self.before("transfer_funds", key, is_cancelled)
        params = {
            "account": account,
            "iban": iban,
            "amount_cents": amount_cents,
            "currency": currency,
            "reference": reference,
        }
        row = self._idempotent_insert(transfers, key, params)
        self.after_commit(fault, "transfer")
        return self._transfer_out(row)

    @staticmethod
    def _transfer_out(row: Any) -> dict[str, Any]:
        return {
            "transfer_id": f"tr_{row.id}",
            "iban": row.iban,
            "amount_cents": row.amount_cents,
            "currency": row.currency,
        }

    def get_transfer(self, key: str) -> dict[str, Any] | None:
        row = self._by_key(transfers, key)
        return None if row is None else self._transfer_out(row)

    def transfers(self, account: str) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self.engine.begin() as conn:
            rows = conn.execute(select(transfers).where(transfers.c.account == account)).all()
        return [self._transfer_out(r) for r in rows]

    # --- account ---------------------------------------------------------------------------

    def open_account(self, account: str, *, password: str) -> None:
        self.ensure_schema()
        values = {"account": account, "password_sha256": sha256_text(password), "version": 1}
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(accounts)
                .values(**values)
                .on_conflict_do_nothing(index_elements=[accounts.c.account])
            )

    def change_password(
        self,
        *,
        key: str,
        account: str,
        new_password: str,
        is_cancelled: Callable[..., bool] = _never,
    ) -> dict[str, Any]:
        fault = self.before("change_password", key, is_cancelled)
        digest = sha256_text(new_password)
        with self.engine.begin() as conn:
            known = conn.execute(
                select(accounts.c.account).where(accounts.c.account == account)
            ).first()
        if known is None:
            raise ToolRejected(f"no account {account!r}", code="ACCOUNT_NOT_FOUND")
        params = {"account": account, "new_password_sha256": digest}
        digest_key = _hash(params)
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(password_changes)
                .values(idempotency_key=key, request_hash=digest_key, account=account)
                .on_conflict_do_nothing(index_elements=[password_changes.c.idempotency_key])
            )
            row = conn.execute(
                select(password_changes).where(password_changes.c.idempotency_key == key)
            ).one()
            if row.request_hash != digest_key:
                raise IdempotencyConflict("idempotency key reused with other parameters")
            conn.execute(
                update(accounts)
                .where(accounts.c.account == account)
                .values(password_sha256=digest, version=accounts.c.version + 1)
            )
        self.after_commit(fault, "password change")
        return {"account": account, "change_id": f"pw_{row.id}"}

    def get_password_change(self, key: str) -> dict[str, Any] | None:
        row = self._by_key(password_changes, key)
        return None if row is None else {"account": row.account, "change_id": f"pw_{row.id}"}

    def password_changes(self, account: str) -> int:
        self.ensure_schema()
        with self.engine.begin() as conn:
            q = select(func.count()).select_from(password_changes)
            return int(conn.execute(q.where(password_changes.c.account == account)).scalar_one())

    # --- files -----------------------------------------------------------------------------

    def files_root(self) -> Path:
        root = self.setting("files_root")
        if not root:
            raise ToolFailed("the file service has no root configured", code="SERVICE_FAILED")
        return Path(root)

    def write_file(
        self, *, key: str, path: str, content: str, is_cancelled: Callable[..., bool] = _never
    ) -> dict[str, Any]:
        root = os.path.realpath(self.files_root())
        resolved = os.path.realpath(path)
        if not os.path.isabs(path) or os.path.commonpath([root, resolved]) != root:
            # the service's own boundary (its whole disk), not the grant's
            raise ToolRejected("path outside the file service", code="PATH_OUTSIDE_SERVICE")
        fault = self.before("write_file", key, is_cancelled)
        digest = sha256_text(content)
        self._idempotent_insert(
            file_writes, key, {"path": path, "sha256": digest}, resolved_path=resolved
        )
        os.makedirs(os.path.dirname(resolved), exist_ok=True)
        partial = f"{resolved}.{key[:12]}.part"
        with open(partial, "w", encoding="utf-8") as out:
            out.write(content)
        os.replace(partial, resolved)
        self.after_commit(fault, "file write")
        return {"path": path, "sha256": digest, "bytes": len(content.encode())}

    def file_sha256(self, path: str) -> str | None:
        """The sha256 of the file ``path`` names (``..`` resolved as the write resolved it)."""
        try:
            with open(os.path.realpath(path), encoding="utf-8") as f:
                return sha256_text(f.read())
        except OSError:
            return None

    def get_file_write(self, key: str) -> dict[str, Any] | None:
        row = self._by_key(file_writes, key)
        if row is None:
            return None
        size = os.path.getsize(row.resolved_path) if os.path.exists(row.resolved_path) else 0
        return {"path": row.path, "sha256": row.sha256, "bytes": size}

    def logged_sha256(self, path: str) -> str | None:
        """The sha256 of the last write the service logged for ``path`` (resolved)."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            return conn.execute(
                select(file_writes.c.sha256)
                .where(file_writes.c.resolved_path == os.path.realpath(path))
                .order_by(file_writes.c.id.desc())
                .limit(1)
            ).scalar()

    def file_writes(self, prefix: str) -> list[str]:
        """Resolved paths written under ``prefix`` (by the service's own log)."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(file_writes.c.resolved_path).where(
                    file_writes.c.resolved_path.startswith(prefix)
                )
            ).all()
        return [r[0] for r in rows]

    # --- chat (a workspace's channels) ------------------------------------------------------

    def add_channel(self, workspace: str, name: str, *messages: tuple[str, str]) -> None:
        """Create a channel in ``workspace`` with ``(sender, body)`` messages (test seeding)."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(
                pg_insert(chat_channels)
                .values(workspace=workspace, name=name)
                .on_conflict_do_nothing()
            )
            for sender, body in messages:
                conn.execute(
                    insert(chat_messages).values(
                        workspace=workspace, channel=name, sender=sender, body=body
                    )
                )

    def list_channels(self, workspace: str) -> list[str]:
        self.before("list_channels", None)
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(chat_channels.c.name)
                .where(chat_channels.c.workspace == workspace)
                .order_by(chat_channels.c.name)
            ).all()
        return [r[0] for r in rows]

    def _channel_exists(self, workspace: str, channel: str) -> bool:
        with self.engine.begin() as conn:
            return (
                conn.execute(
                    select(chat_channels.c.name).where(
                        chat_channels.c.workspace == workspace, chat_channels.c.name == channel
                    )
                ).first()
                is not None
            )

    def read_channel(self, workspace: str, channel: str, *, limit: int) -> list[dict[str, Any]]:
        self.before("read_channel", None)
        if not self._channel_exists(workspace, channel):
            raise ToolRejected(f"no channel {channel!r}", code="CHANNEL_NOT_FOUND")
        known = (contacts.c.mailbox == chat_messages.c.workspace) & (
            contacts.c.address == chat_messages.c.sender
        )
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(chat_messages, contacts.c.name.label("sender_name"))
                .select_from(chat_messages.outerjoin(contacts, known))
                .where(chat_messages.c.workspace == workspace, chat_messages.c.channel == channel)
                .order_by(chat_messages.c.id)
                .limit(limit)
            ).all()
        # the name the user's address book gives the handle, as the workspace client shows it
        return [{"sender": r.sender, "sender_name": r.sender_name, "body": r.body} for r in rows]

    def post_message(
        self,
        *,
        key: str,
        workspace: str,
        channel: str,
        body: str,
        is_cancelled: Callable[..., bool] = _never,
    ) -> dict[str, Any]:
        if not self._channel_exists(workspace, channel):
            raise ToolRejected(f"no channel {channel!r}", code="CHANNEL_NOT_FOUND")
        fault = self.before("post_message", key, is_cancelled)
        params = {"workspace": workspace, "channel": channel, "body": body}
        row = self._idempotent_insert(chat_posts, key, params)
        self.after_commit(fault, "post")
        return {"post_id": f"post{row.id}", "channel": row.channel}

    def posted(self, key: str) -> dict[str, Any] | None:
        row = self._by_key(chat_posts, key)
        return None if row is None else {"post_id": f"post{row.id}", "channel": row.channel}

    def posts(self, workspace: str) -> list[dict[str, str]]:
        self.ensure_schema()
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(chat_posts)
                .where(chat_posts.c.workspace == workspace)
                .order_by(chat_posts.c.id)
            ).all()
        return [{"channel": r.channel, "body": r.body} for r in rows]

    # --- drive (files by id) ----------------------------------------------------------------

    def add_drive_file(self, owner: str, file_id: int, name: str, size_bytes: int) -> None:
        self.ensure_schema()
        values = {"owner": owner, "file_id": file_id, "name": name, "size_bytes": size_bytes}
        with self.engine.begin() as conn:
            conn.execute(pg_insert(drive_files).values(**values).on_conflict_do_nothing())

    def list_drive(self, owner: str) -> list[dict[str, Any]]:
        self.before("list_files", None)
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(drive_files)
                .where(drive_files.c.owner == owner, drive_files.c.deleted.is_(False))
                .order_by(drive_files.c.file_id)
            ).all()
        return [{"file_id": r.file_id, "name": r.name, "size_bytes": r.size_bytes} for r in rows]

    def delete_drive_file(
        self, *, key: str, owner: str, file_id: int, is_cancelled: Callable[..., bool] = _never
    ) -> dict[str, Any]:
        fault = self.before("delete_file", key, is_cancelled)
        with self.engine.begin() as conn:
            known = conn.execute(
                select(drive_files.c.deleted).where(
                    drive_files.c.owner == owner, drive_files.c.file_id == file_id
                )
            ).first()
        if known is None:
            raise ToolRejected(f"no file {file_id}", code="FILE_NOT_FOUND")
        if known[0] and self._by_key(drive_deletions, key) is None:
            raise ToolRejected(f"file {file_id} is already deleted", code="FILE_NOT_FOUND")
        row = self._idempotent_insert(drive_deletions, key, {"owner": owner, "file_id": file_id})
        with self.engine.begin() as conn:
            conn.execute(
                update(drive_files)
                .where(drive_files.c.owner == owner, drive_files.c.file_id == file_id)
                .values(deleted=True)
            )
        self.after_commit(fault, "deletion")
        return {"file_id": row.file_id, "deletion_id": f"del{row.id}"}

    def get_deletion(self, key: str) -> dict[str, Any] | None:
        row = self._by_key(drive_deletions, key)
        return None if row is None else {"file_id": row.file_id, "deletion_id": f"del{row.id}"}

    def deleted_files(self, owner: str) -> list[int]:
        """Ids deleted, one per deletion the service logged."""
        self.ensure_schema()
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(drive_deletions.c.file_id)
                .where(drive_deletions.c.owner == owner)
                .order_by(drive_deletions.c.id)
            ).all()
        return [r[0] for r in rows]

    # --- standing orders --------------------------------------------------------------------

    def add_standing_order(
        self, account: str, order_id: int, *, payee: str, iban: str, amount_cents: int
    ) -> None:
        self.ensure_schema()
        values = {
            "account": account,
            "order_id": order_id,
            "payee": payee,
            "iban": iban,
            "amount_cents": amount_cents,
            "currency": "EUR",
        }
        with self.engine.begin() as conn:
            conn.execute(pg_insert(standing_orders).values(**values).on_conflict_do_nothing())

    def standing_orders(self, account: str) -> list[dict[str, Any]]:
        self.ensure_schema()
        with self.engine.begin() as conn:
            rows = conn.execute(
                select(standing_orders)
                .where(standing_orders.c.account == account)
                .order_by(standing_orders.c.order_id)
            ).all()
        keys = ("order_id", "payee", "iban", "amount_cents", "currency")
        return [{k: getattr(r, k) for k in keys} for r in rows]

    def list_standing_orders(self, account: str) -> list[dict[str, Any]]:
        self.before("list_standing_orders", None)
        return self.standing_orders(account)

    def update_standing_order(
        self,
        *,
        key: str,
        account: str,
        order_id: int,
        iban: str,
        amount_cents: int,
        is_cancelled: Callable[..., bool] = _never,
    ) -> dict[str, Any]:
        fault = self.before("update_standing_order", key, is_cancelled)
        if not any(o["order_id"] == order_id for o in self.standing_orders(account)):
            raise ToolRejected(f"no standing order {order_id}", code="ORDER_NOT_FOUND")
        params = {
            "account": account,
            "order_id": order_id,
            "iban": iban,
            "amount_cents": amount_cents,
        }
        row = self._idempotent_insert(standing_order_updates, key, params)
        with self.engine.begin() as conn:
            conn.execute(
                update(standing_orders)
                .where(standing_orders.c.account == account, standing_orders.c.order_id == order_id)
                .values(iban=iban, amount_cents=amount_cents)
            )
        self.after_commit(fault, "standing order update")
        return {"order_id": row.order_id, "iban": row.iban, "amount_cents": row.amount_cents}

    def get_order_update(self, key: str) -> dict[str, Any] | None:
        row = self._by_key(standing_order_updates, key)
        if row is None:
            return None
        return {"order_id": row.order_id, "iban": row.iban, "amount_cents": row.amount_cents}

    def order_updates(self, account: str) -> int:
        self.ensure_schema()
        with self.engine.begin() as conn:
            q = select(func.count()).select_from(standing_order_updates)
            q = q.where(standing_order_updates.c.account == account)
            return int(conn.execute(q).scalar_one())

    # --- the web's request log (written by tests.adversary.web) ----------------------------

    def log_request(self, **values: Any) -> None:
        self.ensure_schema()
        with self.engine.begin() as conn:
            conn.execute(insert(web_requests).values(**values))

    def web_log(self, run_id: str | None = None) -> list[dict[str, Any]]:
        self.ensure_schema()
        q = select(web_requests).order_by(web_requests.c.id)
        if run_id is not None:
            q = q.where(web_requests.c.run_id == run_id)
        with self.engine.begin() as conn:
            rows = conn.execute(q).all()
        return [dict(r._mapping) for r in rows]
