"""The service's first schema: submissions (the queue), course tokens and the scoring each assignment
was last written under.

Revision ID: r0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "r0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "submissions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("assignment", sa.String(64), nullable=False),
        sa.Column("student", sa.String(64), nullable=False),
        sa.Column("repository", sa.String(200), nullable=True),
        sa.Column("rate_key", sa.String(200), nullable=False),
        sa.Column("commit", sa.String(64), nullable=False),
        sa.Column("jti", sa.String(200), nullable=True, unique=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("graded_at", sa.Float, nullable=True),
        sa.Column("score", sa.Float, nullable=True),
        sa.Column("max_score", sa.Float, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("lease_owner", sa.String(100), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
    )
    op.create_index("ix_submissions_queue", "submissions", ["status", "received_at"])
    op.create_index("ix_submissions_student", "submissions", ["assignment", "student", "received_at"])
    op.create_index("ix_submissions_rate", "submissions", ["rate_key", "received_at"])
    op.create_table(
        "course_tokens",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("assignment", sa.String(64), nullable=False),
        sa.Column("student", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "scored_under",
        sa.Column("assignment", sa.String(64), primary_key=True),
        sa.Column("digest", sa.String(80), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("scored_under")
    op.drop_table("course_tokens")
    op.drop_table("submissions")
