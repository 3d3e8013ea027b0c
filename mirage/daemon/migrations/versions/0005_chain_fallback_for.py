"""chains.fallback_for: the configured policy a fallback stands in for, in its own column

Before, ``chains.policy`` held a display label, ``"reactive (fallback: xgb)"``, that
``mirage status`` parsed back apart. Now ``policy`` is the policy that decides and
``fallback_for`` the configured one it replaces ("" when the configured one decides);
existing labels are split once here.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28 22:30:00
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_LABEL = re.compile(r"^(?P<used>\S+) \(fallback: (?P<configured>[^)]*)\)$")


def _chains() -> sa.TableClause:
    return sa.table(
        "chains",
        sa.column("id", sa.String),
        sa.column("policy", sa.String),
        sa.column("fallback_for", sa.String),
    )


def upgrade() -> None:
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("fallback_for", sa.String(length=64), nullable=False, server_default="")
        )
    bind = op.get_bind()
    chains = _chains()
    rows = bind.execute(
        sa.select(chains.c.id, chains.c.policy).where(chains.c.policy.like("% (fallback: %)"))
    )
    for chain_id, label in rows.all():
        m = _LABEL.match(label or "")
        if m is not None:
            bind.execute(
                chains.update()
                .where(chains.c.id == chain_id)
                .values(policy=m["used"], fallback_for=m["configured"].strip())
            )


def downgrade() -> None:
    bind = op.get_bind()
    chains = _chains()
    rows = bind.execute(
        sa.select(chains.c.id, chains.c.policy, chains.c.fallback_for).where(
            chains.c.fallback_for != ""
        )
    )
    for chain_id, used, configured in rows.all():
        label = f"{used} (fallback: {configured})"[:64]
        bind.execute(chains.update().where(chains.c.id == chain_id).values(policy=label))
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.drop_column("fallback_for")
