"""Alembic's environment for the service's database: run on the connection ``grader.service.db.migrate``
hands it (``config.attributes["connection"]``), never from an ``alembic.ini``."""

from alembic import context

from grader.service.db import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
