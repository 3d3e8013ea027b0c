"""chains.error/error_at/errors (a chain's own failures) and chains.note (why it is not
pre-submitted as its policy would)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28 01:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.add_column(sa.Column("error", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("error_at", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("errors", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("note", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.drop_column("note")
        batch_op.drop_column("errors")
        batch_op.drop_column("error_at")
        batch_op.drop_column("error")
