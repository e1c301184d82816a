"""The fake services' own tables (``adv_*``): created by the plug-in's set-up step
(:meth:`tests.adversary.service.AdversaryServices.ensure_schema`), never by the ledger's
migrations. Every effect an attacker could want is a row here (or a file on disk)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
)

__all__ = [
    "accounts",
    "chat_channels",
    "chat_messages",
    "chat_posts",
    "config",
    "contacts",
    "drive_deletions",
    "drive_files",
    "file_writes",
    "inbox",
    "metadata",
    "outbox",
    "password_changes",
    "standing_order_updates",
    "standing_orders",
    "transfers",
    "web_requests",
]

metadata = MetaData()

config = Table(
    "adv_config",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", Text, nullable=False),
)
inbox = Table(
    "adv_inbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("mailbox", String(200), nullable=False, index=True),
    Column("sender", String(254), nullable=False),
    Column("subject", String(300), nullable=False),
    Column("body", Text, nullable=False),
    Column("received_at", DateTime(timezone=True), server_default=func.now()),
)
#: The user's address book: the name the mail service shows for a sender it knows (the user
#: wrote it; a sender cannot choose it).
contacts = Table(
    "adv_contacts",
    metadata,
    Column("mailbox", String(200), primary_key=True),
    Column("address", String(254), primary_key=True),
    Column("name", String(200), nullable=False),
)
outbox = Table(
    "adv_outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("mailbox", String(200), nullable=False, index=True),
    Column("recipients", JSON, nullable=False),
    Column("subject", String(300), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
transfers = Table(
    "adv_transfers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("account", String(200), nullable=False, index=True),
    Column("iban", String(64), nullable=False),
    Column("amount_cents", Integer, nullable=False),
    Column("currency", String(3), nullable=False),
    Column("reference", String(140), nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
accounts = Table(
    "adv_accounts",
    metadata,
    Column("account", String(200), primary_key=True),
    Column("password_sha256", String(64), nullable=False),
    Column("version", Integer, nullable=False, server_default="1"),
)
password_changes = Table(
    "adv_password_changes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("account", String(200), nullable=False, index=True),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
file_writes = Table(
    "adv_file_writes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("path", Text, nullable=False),
    Column("resolved_path", Text, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
web_requests = Table(
    "adv_web_requests",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(36), index=True),
    Column("method", String(10), nullable=False),
    Column("target", Text, nullable=False),
    Column("host", String(300), nullable=False),
    Column("path", Text, nullable=False),
    Column("query", Text, nullable=False),
    Column("status", Integer, nullable=False),
    Column("fault", String(32)),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)

# --- the services the benign tasks also use (:mod:`tests.adversary.benign`) ---------------

chat_channels = Table(
    "adv_chat_channels",
    metadata,
    Column("workspace", String(200), primary_key=True),
    Column("name", String(100), primary_key=True),
)
chat_messages = Table(
    "adv_chat_messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("workspace", String(200), nullable=False, index=True),
    Column("channel", String(100), nullable=False),
    Column("sender", String(100), nullable=False),
    Column("body", Text, nullable=False),
)
chat_posts = Table(
    "adv_chat_posts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("workspace", String(200), nullable=False, index=True),
    Column("channel", String(100), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
drive_files = Table(
    "adv_drive_files",
    metadata,
    Column("owner", String(200), primary_key=True),
    Column("file_id", Integer, primary_key=True, autoincrement=False),
    Column("name", String(300), nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("deleted", Boolean, nullable=False, server_default="false"),
)
drive_deletions = Table(
    "adv_drive_deletions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("owner", String(200), nullable=False, index=True),
    Column("file_id", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
standing_orders = Table(
    "adv_standing_orders",
    metadata,
    Column("account", String(200), primary_key=True),
    Column("order_id", Integer, primary_key=True, autoincrement=False),
    Column("payee", String(200), nullable=False),
    Column("iban", String(64), nullable=False),
    Column("amount_cents", Integer, nullable=False),
    Column("currency", String(3), nullable=False),
)
standing_order_updates = Table(
    "adv_standing_order_updates",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(128), nullable=False, unique=True),
    Column("request_hash", String(64), nullable=False),
    Column("account", String(200), nullable=False, index=True),
    Column("order_id", Integer, nullable=False),
    Column("iban", String(64), nullable=False),
    Column("amount_cents", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
)
