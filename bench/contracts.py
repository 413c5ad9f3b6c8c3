"""The `write_contract` workload of bench/vs_java_iceberg.py: what a data contract costs a write.

The same day-partitioned append of the cached events three ways, alternating, into tables made before (untimed, by
a small first write: a contract is declared once, and its creation writes its Delta constraints): without a
contract; under a contract of five rules (none broken, policy `fail`: the checks ride along in the write's job);
and under five rules one of which 1% of the rows break, policy `quarantine` (the broken rows go to the quarantine
table, from the one cached scan of the input). The target is five rules <= 1.15x the write without."""

from __future__ import annotations

import time

RULES = {
    "id_positive": "id >= 0",
    "known_user": "user_id >= 0 AND user_id < 100000",
    "amount_positive": "amount >= 0",
    "known_event": "event_type IN ('view', 'click', 'cart', 'buy', 'refund')",
    "known_region": "region BETWEEN 0 AND 31",
}


def contract_workload(bench, side_cls, row_cls) -> None:
    from lakehouse_assets import Contract, TableOptions

    five = TableOptions(contract=Contract(rules=RULES, not_null=["id"]))
    one_percent = TableOptions(contract=Contract(rules={**RULES, "id_positive": "id % 100 <> 7"}, not_null=["id"], on_violation="quarantine"))
    plain, checked, quarantined = side_cls("no contract"), side_cls("ours, five rules"), side_cls("five rules, 1% quarantined")
    runs = {"plain": (plain, None), "checked": (checked, five), "quarantined": (quarantined, one_percent)}
    names = {key: f"b.{bench.name(f'contract_{key}')}" for key in runs}
    for key, (_, options) in runs.items():
        bench.lh.write(bench.df.limit(1000), names[key], partition_by=["day(event_time)"], table=options)
    for rep in range(bench.args.reps):
        order = list(runs) if rep % 2 == 0 else list(reversed(runs))
        for key in order:
            side = runs[key][0]
            t0 = time.perf_counter()
            result = bench.lh.write(bench.df, names[key])
            side.times.append(time.perf_counter() - t0)
            side.files, side.bytes = result.files_added, result.bytes_written
        print(f"  write_contract rep {rep + 1}: " + ", ".join(f"{s.name} {s.times[-1]:.2f}s" for s, _ in runs.values()), flush=True)
    note = f"five rules / none {checked.median / plain.median:.3f}x; 1% quarantined / none {quarantined.median / plain.median:.3f}x (target five rules <= 1.15x)"
    bench.report(row_cls("write_contract", checked, [plain, quarantined], note))
