"""segments.revoke_at: a pre-submitted successor Mirage revokes (cancels while pending)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26 11:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revoke_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.drop_column("revoke_at")
