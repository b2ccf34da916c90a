"""The PostgreSQL backend: several hosts' engines share one database (``PgStore``)."""

from ._store import PgStore, is_postgres_url

__all__ = ["PgStore", "is_postgres_url"]
