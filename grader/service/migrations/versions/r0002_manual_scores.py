"""Instructors' manual scores, entered on the pages: one row per assignment, student and item.

Revision ID: r0002
Revises: r0001
"""

import sqlalchemy as sa
from alembic import op

revision = "r0002"
down_revision = "r0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "manual_scores",
        sa.Column("assignment", sa.String(64), primary_key=True),
        sa.Column("student", sa.String(64), primary_key=True),
        sa.Column("item", sa.String(200), primary_key=True),
        sa.Column("points", sa.Float, nullable=False),
        sa.Column("comment", sa.Text, nullable=True),
        sa.Column("entered_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("manual_scores")
