"""Database access: engine, tenant-scoped transactions, ORM tables, migrations, embedded Postgres."""
