"""The instructor's page sessions in the database (``page_sessions``), no longer in the service's
memory: a restart keeps them and every service process on one database shares them; only each session
id's SHA-256 is kept.

Revision ID: r0003
Revises: r0002
"""

import sqlalchemy as sa
from alembic import op

revision = "r0003"
down_revision = "r0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "page_sessions",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_page_sessions_expires_at", "page_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_page_sessions_expires_at", table_name="page_sessions")
    op.drop_table("page_sessions")
