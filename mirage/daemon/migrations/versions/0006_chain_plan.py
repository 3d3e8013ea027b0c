"""chains.plan: the plan a chain was registered with (``mirage chain submit --plan``)

The request (work, scaling, overhead, candidates), the shape chosen, its predicted
completion and interval, and the segment it was made for; re-planning
(``[plan] replan``) rewrites it. NULL for chains registered with a shape of their own.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.add_column(sa.Column("plan", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.drop_column("plan")
