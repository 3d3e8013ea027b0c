"""segments.restart_s and handoff_s: each segment's measured restart overhead and handoff

``restart_s``: from the job-side helper's timing report (its ``start`` returning to its
``resumed``: mirage.daemon.timing); ``handoff_s``: the predecessor's end minus this
segment's start, when positive, from Slurm's times. NULL where not measured. A chain's
transitions are charged with its own figures once it has them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 23:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("restart_s", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("handoff_s", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.drop_column("handoff_s")
        batch_op.drop_column("restart_s")
