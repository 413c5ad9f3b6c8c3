"""The test servers' start: a port chosen free can be taken by another process before the server binds it, and a
server's capacity must not follow the disk's free space."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .servers import SEAWEEDFS_VOLUME_MB, SEAWEEDFS_VOLUMES, PortTaken, free_ports, start_on_free_ports, stop_pid, wait_for_port


def _http_server(tmp_path: Path, port: int) -> tuple[subprocess.Popen, int]:
    """Python's HTTP server on `port`, a server that exits when its port is in use."""
    log = tmp_path / f"http-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, proc, log)
    except BaseException:
        stop_pid(proc.pid)
        raise
    return proc, port


def test_a_server_whose_port_another_process_took_is_started_again_on_new_ports(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, not listening: as a client's port is
        taken = held.getsockname()[1]
        chosen = iter([taken])  # the first start gets the taken port, as a race would give it
        starts = []

        def start():
            port = next(chosen, None) or free_ports(1)[0]
            starts.append(port)
            return _http_server(tmp_path, port)

        proc, port = start_on_free_ports(start)
        try:
            assert starts == [taken, port] and port != taken
            assert "Address already in use" in (tmp_path / f"http-{taken}.log").read_text()
        finally:
            stop_pid(proc.pid)

        with pytest.raises(PortTaken, match="Address already in use"):
            start_on_free_ports(lambda: _http_server(tmp_path, taken), attempts=2)


def test_a_server_that_fails_for_another_reason_is_not_started_again(tmp_path):
    starts = []

    def start():
        starts.append(1)
        log = tmp_path / "bad.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit('no such config')"], stdout=out, stderr=subprocess.STDOUT)
        wait_for_port(free_ports(1)[0], proc, log)

    with pytest.raises(RuntimeError, match="no such config") as raised:
        start_on_free_ports(start)
    assert not isinstance(raised.value, PortTaken) and starts == [1]


def test_the_s3_servers_capacity_does_not_depend_on_the_disks_free_space(seaweedfs):
    """Sized from free space, the server had a few volumes on a nearly full disk and refused writes to new buckets."""
    log = (seaweedfs.data_dir / "weed.log").read_text(errors="replace")
    assert re.search(rf"Volume Size:\s+{SEAWEEDFS_VOLUME_MB}\.00 MiB", log), log[-2000:]
    assert re.search(rf"Free Volumes:\s+{SEAWEEDFS_VOLUMES}\b", log), log[-2000:]
