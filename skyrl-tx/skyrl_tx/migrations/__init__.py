"""Alembic migrations of the service's database, run in-process at start-up (`upgrade(engine)`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

SCRIPT_LOCATION = str(Path(__file__).resolve().parent)


def alembic_config(engine: Engine) -> Config:
    """An Alembic config whose migrations run on `engine` (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply every migration up to `revision` (idempotent: a current database is left as it is)."""
    command.upgrade(alembic_config(engine), revision)
