"""The Iceberg side, the source of truth: pyiceberg commits and reads the metadata.

    committer.py            externally written Parquet files committed as one snapshot; a snapshot's live data files
    clustered_manifests.py  a commit's added files in manifests clustered by partition
    one_read_overwrite.py   pyiceberg's overwrite, each manifest it may rewrite read once
    live_manifests.py       the snapshot that ends an erasure's history: manifests of live files only
    partition_summaries.py  the partitions a snapshot changed, from its summary alone
    metadata.py             table metadata with staged updates applied, without copying the table's history
"""
