"""The declarative base of the ledger's models and the column helpers they share
(:mod:`warrant.ledger.models` re-exports ``Base``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = ["JSON", "Base", "ViewBase", "created_now"]

JSON = JSONB(none_as_null=True)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONB, list[Any]: JSONB}


class ViewBase(DeclarativeBase):
    """Models of views (read only): a metadata of their own, which migrations, retention and
    ``create_all`` never see."""

    type_annotation_map = {dict[str, Any]: JSONB, list[Any]: JSONB}


def created_now() -> Mapped[datetime]:
    """A ``timestamptz`` column the server sets to ``now()`` on insert."""
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)
