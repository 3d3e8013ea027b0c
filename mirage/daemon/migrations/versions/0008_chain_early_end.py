"""chains.early_end_s: how long before its limit the chain's last own-ended segment ended

Set when a segment ends on its own (COMPLETED or TIMEOUT, not by a handoff or a fault):
its limit minus its run, 0 for one that ran to its limit. A chain whose segments end well
before their limits is not pre-submitted for ([policy] presubmit_only_limit_bound). NULL
until a segment has ended so.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 16:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.add_column(sa.Column("early_end_s", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.drop_column("early_end_s")
