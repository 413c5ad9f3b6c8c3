"""The `stats` of live Delta add actions as the log spells them, before any reader parses them.

delta-rs hands back a statistic it cannot parse (a year written `10-05-06`) as NULL, the same as one the writer
never recorded (Spark keeps no min/max of booleans, none of an all-NULL column, and older writers no stats at all).
The two mean different things to `verify`: an absent statistic only stops readers skipping the file, an unreadable
one may be misread by a reader that parses it differently. This reads the log itself for the few adds that need the
distinction: the commits newer than the latest checkpoint, newest first, then that checkpoint's Parquet parts.

It also reads what a run of commits changed (`logged_changes`): delta-rs loads the live state of one version, not
the actions of a commit, and the formats-agree check of a write compares the files that write's versions added
and removed with the files its snapshots did.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ...io.storage import delta_path, join_uri
from .followed_log import read_commit, read_commit_info

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")


def logged_stats(storage, root_uri: str, version: int, paths: set[str]) -> dict[str, dict[str, Any] | None]:
    """Decoded relative path -> its live add's stats JSON (`{}` when the add has none, None when it is no JSON), for the
    `paths` found.

    A path not found (a v2 checkpoint, an unreadable log file) is left out: the caller cannot tell, and says nothing."""
    fs, log = storage.filesystem(join_uri(root_uri, "_delta_log"))
    from pyarrow.fs import FileSelector

    names = [i.base_name for i in fs.get_file_info(FileSelector(log, allow_not_found=True)) if i.is_file]
    checkpoints = sorted({int(m.group(1)) for n in names if (m := _CHECKPOINT.match(n)) and int(m.group(1)) <= version})
    since = checkpoints[-1] if checkpoints else -1
    commits = sorted((int(m.group(1)) for n in names if (m := _COMMIT.match(n)) and since < int(m.group(1)) <= version), reverse=True)
    found: dict[str, dict[str, Any] | None] = {}
    for v in commits:  # the newest add of a live path is its live one
        try:
            with fs.open_input_stream(f"{log}/{v:020d}.json") as f:
                lines = f.read().decode().split("\n")  # JSON lines end at "\n" only: splitlines() also breaks at U+2028, U+0085... inside a string value
        except OSError:
            return found
        for line in lines:
            add = json.loads(line).get("add") if line.strip() else None
            if add is not None:
                _note(found, paths, add.get("path"), add.get("stats"))
        if paths <= found.keys():
            return found
    if since >= 0:
        _from_checkpoint(fs, log, [n for n in names if (m := _CHECKPOINT.match(n)) and int(m.group(1)) == since], paths, found)
    return found


def _from_checkpoint(fs, log: str, parts: list[str], paths: set[str], found: dict[str, dict[str, Any] | None]) -> None:
    import pyarrow.parquet as pq

    for part in parts:
        try:
            with fs.open_input_file(f"{log}/{part}") as f:
                adds = pq.read_table(f, columns=["add"]).column("add").to_pylist()
        except (OSError, KeyError):
            continue
        for add in adds:
            if add is not None:
                _note(found, paths, add.get("path"), add.get("stats"))


def _note(found: dict[str, dict[str, Any]], paths: set[str], path: str | None, stats: str | None) -> None:
    if path is None:
        return
    p = delta_path(path)
    if p in paths and p not in found:
        try:
            found[p] = json.loads(stats) if stats else {}
        except ValueError:
            found[p] = None


@dataclass
class LoggedChanges:
    """What the commits after one version did to the live files, net (decoded relative paths)."""

    added: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> its newest add action, as logged
    removed: set[str] = field(default_factory=set)  # paths live before the first commit and removed since
    commits: dict[int, dict[str, Any]] = field(default_factory=dict)  # version -> its commitInfo (`{}` when none)


def logged_changes(storage, root_uri: str, after: int, upto: int) -> LoggedChanges | None:
    """The net file changes of the commits `after + 1 .. upto`, and the commitInfo of each of `after .. upto`; None
    when one of those commits cannot be read (cleaned up with the log's retention)."""
    out = LoggedChanges()
    events: list[tuple[str, str, dict[str, Any]]] = []
    try:
        # Of the first commit only its commitInfo: reading all of it (an import's commit lists every file) would cost
        # what the table holds, not what changed.
        if (first := read_commit_info(storage, root_uri, after)) is None:
            return None
        out.commits[after] = first
        for v in range(after + 1, upto + 1):
            if (actions := read_commit(storage, root_uri, v)) is None:
                return None
            out.commits[v] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            # Within one commit, its removes first: a path removed and added again is live after it.
            events += [("remove", delta_path(a["remove"]["path"]), a["remove"]) for a in actions if "remove" in a]
            events += [("add", delta_path(a["add"]["path"]), a["add"]) for a in actions if "add" in a]
    except OSError:
        return None
    out.added, out.removed = net_changes(events)
    return out


def net_changes(events) -> tuple[dict[str, Any], set[str]]:
    """(path -> payload of its last add, for paths whose last event adds them; paths live before the events, i.e.
    whose first event removes them, and whose last removes them) of a run of ("add" | "remove", path, payload)."""
    first: dict[str, str] = {}
    last: dict[str, tuple[str, Any]] = {}
    for kind, path, payload in events:
        first.setdefault(path, kind)
        last[path] = (kind, payload)
    added = {p: payload for p, (kind, payload) in last.items() if kind == "add"}
    removed = {p for p, (kind, _) in last.items() if kind == "remove" and first[p] == "remove"}
    return added, removed
