"""The tests' free ports: ports asked for one after another are never the same port."""

from __future__ import annotations

from tests.support.mcp_peers import free_port, free_ports


def test_ports_asked_for_in_a_row_are_all_different() -> None:
    # Independent picks from the ~3000 ports of the range would repeat within 300 almost surely.
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_blocks_asked_for_in_a_row_do_not_overlap() -> None:
    blocks = [set(range(base, base + 5)) for base in (free_ports(5) for _ in range(60))]
    taken: set[int] = set()
    for block in blocks:
        assert not block & taken
        taken |= block
