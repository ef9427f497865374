"""The test harness's sidecar process: a start whose port another process took is tried again on
other ports (the same port taken four times in a row once failed a CI run)."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.sidecar import SidecarProcess


def test_a_taken_port_is_replaced_before_the_start_is_tried_again(tmp_path: Path) -> None:
    sidecar = SidecarProcess(tmp_path)
    taken = sidecar.admin_port
    grpc_port = sidecar.grpc_port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        with sidecar:
            assert sidecar.admin_port != taken
            assert sidecar.config["admin"]["endpoint"] == f"127.0.0.1:{sidecar.admin_port}"
            assert sidecar.metrics()  # the admin API answers on its new port
    assert sidecar.grpc_port != grpc_port  # every port this object chose is chosen again
    assert "already in use" in sidecar.stderr()
