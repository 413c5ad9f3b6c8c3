"""A table in its catalog: the catalogs the lakehouse connects to, creating or loading a table for a write,
and planning the schema change a write needs."""
