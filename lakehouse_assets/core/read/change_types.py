"""The change feed's columns and labels (`Lakehouse.changes`, core/read/changes.py, and the Delta change data files).

Their own module, free of imports: the executor tasks that write a merge's change data (core/write/merge/changes.py)
label rows with them, and a Python worker should not import the catalogs and readers of `changes` to get four strings.
"""

CHANGE_TYPE = "_change_type"
COMMIT_SNAPSHOT_ID = "_commit_snapshot_id"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
INSERT, DELETE, UPDATE_PREIMAGE, UPDATE_POSTIMAGE = "insert", "delete", "update_preimage", "update_postimage"
CHANGE_COLUMNS = (CHANGE_TYPE, COMMIT_SNAPSHOT_ID, COMMIT_VERSION, COMMIT_TIMESTAMP)
