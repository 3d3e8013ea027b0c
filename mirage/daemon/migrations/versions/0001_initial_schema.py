"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-26 00:09:06.684714
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:

    op.create_table(
        "chains",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("cluster", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("uid", sa.Integer(), nullable=False),
        sa.Column("gid", sa.Integer(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "ACTIVE",
                "COMPLETED",
                "STOPPED",
                "CANCELLED",
                "FAILED",
                name="chainstate",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("script", sa.LargeBinary(), nullable=False),
        sa.Column("script_sha256", sa.String(length=64), nullable=False),
        sa.Column("script_path", sa.Text(), nullable=False),
        sa.Column("chdir", sa.Text(), nullable=False),
        sa.Column("export", sa.Text(), nullable=False),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("sbatch_args", sa.JSON(), nullable=False),
        sa.Column("partition", sa.String(length=64), nullable=True),
        sa.Column("time_limit_s", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("gres", sa.String(length=128), nullable=True),
        sa.Column("segments_target", sa.Integer(), nullable=True),
        sa.Column("until_file", sa.Text(), nullable=True),
        sa.Column("trained_s", sa.Integer(), nullable=False),
        sa.Column("next_index", sa.Integer(), nullable=False),
        sa.Column("policy", sa.String(length=64), nullable=False),
        sa.Column("rejections", sa.Integer(), nullable=False),
        sa.Column("decided_at", sa.BigInteger(), nullable=True),
        sa.Column("predicted_start", sa.BigInteger(), nullable=True),
        sa.Column("predicted_low", sa.BigInteger(), nullable=True),
        sa.Column("predicted_high", sa.BigInteger(), nullable=True),
        sa.Column("slurm_estimate", sa.BigInteger(), nullable=True),
        sa.Column("slurm_estimate_for", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chains_owner"), ["owner"], unique=False)
        batch_op.create_index(batch_op.f("ix_chains_state"), ["state"], unique=False)

    op.create_table(
        "daemon_state",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("chain_id", sa.String(length=32), nullable=True),
        sa.Column("kind", sa.String(length=48), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_events_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_events_chain_id"), ["chain_id"], unique=False)

    op.create_table(
        "leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("acquired_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "submissions",
        sa.Column("token", sa.String(length=32), nullable=False),
        sa.Column("chain_id", sa.String(length=32), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "INTENT",
                "SUBMITTED",
                "UNKNOWN",
                "ADOPTED",
                "LOST",
                "REJECTED",
                name="submissionstate",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("time_limit_s", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=True),
        sa.Column("presubmitted", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("resolved_at", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["chain_id"],
            ["chains.id"],
        ),
        sa.PrimaryKeyConstraint("token"),
    )
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_submissions_chain_id"), ["chain_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_submissions_state"), ["state"], unique=False)

    op.create_table(
        "segments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("chain_id", sa.String(length=32), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("token", sa.String(length=32), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("submitted_at", sa.BigInteger(), nullable=False),
        sa.Column("presubmitted", sa.Boolean(), nullable=False),
        sa.Column("predicted_start", sa.BigInteger(), nullable=True),
        sa.Column("slurm_estimate", sa.BigInteger(), nullable=True),
        sa.Column("job_state", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.String(length=128), nullable=False),
        sa.Column("start", sa.BigInteger(), nullable=True),
        sa.Column("end", sa.BigInteger(), nullable=True),
        sa.Column("time_limit_s", sa.Integer(), nullable=True),
        sa.Column("missing_since", sa.BigInteger(), nullable=True),
        sa.Column("signalled_at", sa.BigInteger(), nullable=True),
        sa.Column("cancelled_by_mirage", sa.Boolean(), nullable=False),
        sa.Column("requeued", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=True),
        sa.Column("finished", sa.Boolean(), nullable=False),
        sa.Column("transition_recorded", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["chain_id"],
            ["chains.id"],
        ),
        sa.ForeignKeyConstraint(
            ["token"],
            ["submissions.token"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token"),
    )
    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.create_index("ix_segments_chain_index", ["chain_id", "index"], unique=False)
        batch_op.create_index(batch_op.f("ix_segments_finished"), ["finished"], unique=False)
        batch_op.create_index(batch_op.f("ix_segments_job_id"), ["job_id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("segments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_segments_job_id"))
        batch_op.drop_index(batch_op.f("ix_segments_finished"))
        batch_op.drop_index("ix_segments_chain_index")

    op.drop_table("segments")
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_submissions_state"))
        batch_op.drop_index(batch_op.f("ix_submissions_chain_id"))

    op.drop_table("submissions")
    op.drop_table("leases")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_events_chain_id"))
        batch_op.drop_index(batch_op.f("ix_events_at"))

    op.drop_table("events")
    op.drop_table("daemon_state")
    with op.batch_alter_table("chains", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_chains_state"))
        batch_op.drop_index(batch_op.f("ix_chains_owner"))

    op.drop_table("chains")
