"""A Structured Streaming sink: each micro-batch of a query written to both formats exactly once.

`StreamWriter` is the function a query hands to `foreachBatch`. Each micro-batch is one write (append, merge or
overwrite, core/write/table_write.py) whose Iceberg snapshot summary records the query's id and the batch id
(`SummaryKeys.STREAM_QUERY_ID` / `STREAM_BATCH_ID`); its Delta commit carries them as a `txn` action (appId = the
query id, version = the batch id), as Spark's own Delta sink writes it.

Spark replays a micro-batch whose end it did not record in the checkpoint (the process died after the sink ran,
or while it ran). Batch ids of one query only grow, so the sink compares the batch id with the last one the table
holds for that query, found at the newest snapshot of the query (normally the table's newest snapshot: one step),
or in the Delta log's `txn` when snapshot expiry removed every snapshot of the query. A batch already committed
commits nothing again; if the process died between the Iceberg and the Delta commit, Delta is caught up.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from pyiceberg.table import Table

from ..errors import CommitConflict, LakehouseError, SpecError, TableNotFound, WriteError
from ..formats import history
from ..model import MergeOptions, TableOptions, WriteResult
from ..properties import SummaryKeys
from ..schema.window import Slice, Window
from ..spark.checkpoint import error_summary
from ..spark.compat import streaming_query_id
from . import transaction

log = logging.getLogger("lakehouse")

CONFLICT_ATTEMPTS = 5  # a batch that lost a race with another commit (e.g. compaction) is planned again this often
MODES = ("append", "merge", "overwrite")
RESTART = (
    " The stream stopped at this batch and nothing of it was committed in either format: fix the cause (repair or replace the"
    " input file, cast the column, dedupe the keys or give MergeOptions(order_by=...)), then restart the query from its"
    " checkpoint: Spark runs this batch again."
)


@dataclass
class StreamWriter:
    """`df.writeStream.foreachBatch(StreamWriter(lakehouse, "db.events", ...))`: see the module docstring.

    `window`: for mode="overwrite", the part of the table each batch replaces: a `Window`/`Slice`, or a function
    `(batch_df, batch_id) -> Window | Slice` (e.g. the days the batch holds). Without it a batch replaces the
    whole table (e.g. an aggregation in complete output mode).
    `query_id`: the stream's stable id; default: the running query's own id (kept in its checkpoint)."""

    lakehouse: Any  # the Lakehouse facade (core/lakehouse.py)
    identifier: str
    mode: str = "append"
    partition_by: Sequence[str] | None = None
    merge: MergeOptions | None = None
    window: Window | Slice | Callable[[Any, int], Window | Slice] | None = None
    table: TableOptions | None = None
    query_id: str | None = None
    writer: dict[str, str] | None = None
    results: list[WriteResult] = field(default_factory=list)  # what each batch of this process committed, in order

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"Table {self.identifier}: the stream writer's mode must be one of {', '.join(MODES)}, not {self.mode!r}.")
        if self.window is not None and self.mode != "overwrite":
            raise SpecError(f"Table {self.identifier}: window= is for mode='overwrite' (each batch replaces that part of the table), not {self.mode!r}.")

    def __call__(self, df, batch_id: int) -> WriteResult:
        query_id = self.query_id or streaming_query_id(df.sparkSession)
        if not query_id:
            raise SpecError(
                f"Table {self.identifier}: the stream writer runs outside a streaming query's foreachBatch (or on Spark Connect) "
                "and cannot tell the query's id: pass query_id=<a stable name of the stream> to stream_writer."
            )
        batch_id = int(batch_id)
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            done = self._already_committed(query_id, batch_id)
            if done is not None:
                self.results.append(done)
                return done
            try:
                result = self._write(df, query_id, batch_id)
                break
            except CommitConflict as e:
                # Another commit (compaction, another writer) changed the files this batch planned against: plan again.
                if attempt == CONFLICT_ATTEMPTS:
                    raise type(e)(self._message(query_id, batch_id, df, e)) from e
                log.info("Table %s: stream batch %s lost a race (attempt %d), planning it again: %s", self.identifier, batch_id, attempt, e)
                time.sleep(0.1 * attempt)
            except LakehouseError as e:
                raise type(e)(self._message(query_id, batch_id, df, e)) from e
            except Exception as e:  # noqa: BLE001 - Spark's own error reading the batch's input (a malformed file)
                raise WriteError(
                    f"{self._context(query_id, batch_id, df)}reading or writing the batch failed: {error_summary(e)}. Nothing of this batch was committed in either format." + RESTART
                ) from e
        self.results.append(result)
        return result

    def _write(self, df, query_id: str, batch_id: int) -> WriteResult:
        window = self.window(df, batch_id) if callable(self.window) else self.window
        return self.lakehouse.write(
            df,
            self.identifier,
            self.mode,
            partition_by=self.partition_by,
            merge=self.merge,
            window=window,
            table=self.table,
            writer=self.writer,
            snapshot_properties={SummaryKeys.STREAM_QUERY_ID: query_id, SummaryKeys.STREAM_BATCH_ID: str(batch_id)},
        )

    def _already_committed(self, query_id: str, batch_id: int) -> WriteResult | None:
        """The earlier commit's result when the table already holds this batch (Delta caught up if it lags), else None."""
        try:
            table = self.lakehouse.load(self.identifier)
        except TableNotFound:
            return None
        ctx = self.lakehouse.context
        delta_on = ctx.delta_enabled(table)
        last, snapshot_id = last_committed_batch(table, query_id, ctx.mirror(table) if delta_on else None)
        if last is None or batch_id > last:
            return None
        log.info("Table %s: stream %s batch %s is already committed (last batch %s); not committing again", self.identifier, query_id, batch_id, last)
        result = WriteResult.for_table(self.identifier, table, self.mode, snapshot_id)
        result.duplicate_of_earlier_write = True
        if delta_on:
            transaction.mirror_to_delta(ctx.mirror(table), table, result)  # the process may have died before the Delta commit
        return result

    def _context(self, query_id: str, batch_id: int, df) -> str:
        # foreachBatch hands the batch over as an RDD-backed DataFrame: the files it came from are not known here.
        return f"Table {self.identifier}, stream {query_id}, batch {batch_id}: "

    def _message(self, query_id: str, batch_id: int, df, e: BaseException) -> str:
        inner = str(e).removeprefix(f"Table {self.identifier}: ")
        return self._context(query_id, batch_id, df) + inner + RESTART


def last_committed_batch(table: Table, query_id: str, mirror=None) -> tuple[int | None, int | None]:
    """(the last batch id of `query_id` the table holds, the snapshot that committed it), from the newest snapshot of
    the query in the current history, else from the Delta log's `txn` for the query (its snapshot unknown: None)."""
    for snap in history.ancestors(table):
        summary = history.summary(snap)
        if summary.get(SummaryKeys.STREAM_QUERY_ID) == query_id:
            return int(summary[SummaryKeys.STREAM_BATCH_ID]), snap.snapshot_id
    delta = mirror.load() if mirror is not None else None
    version = delta.transaction_version(query_id) if delta is not None else None
    return version, None

