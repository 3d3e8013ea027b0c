"""segments.predicted_low/high: the 90% interval stated with a pre-submission's forecast

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27 12:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("predicted_low", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("predicted_high", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.drop_column("predicted_high")
        batch_op.drop_column("predicted_low")
