"""A table in its catalog: the catalogs the lakehouse connects to, creating or loading a table for a write,
planning the schema change a write needs, branches, the commit lock, and dropping or renaming a table."""
