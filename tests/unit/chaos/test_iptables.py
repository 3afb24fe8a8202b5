"""The iptables argument lists, built without running iptables: each user's own chain, DROP both ways between two
loopback addresses, and a teardown that only names the chain it removes."""

from __future__ import annotations

import pytest

from chaos.iptables import CHAIN, CHAOS_CHAIN, INPUT, OUTPUT, create_args, delete_args, drop_args, flush_args, jump_args


def test_a_chain_is_created_and_jumped_to_from_each_hook_for_loopback_only() -> None:
    assert create_args("VMQPY-TEST", (OUTPUT,)) == [
        ["-N", "VMQPY-TEST"],
        ["-I", "OUTPUT", "-o", "lo", "-j", "VMQPY-TEST"],
    ]
    assert create_args(CHAIN, CHAOS_CHAIN.hooks) == [
        ["-N", "VMQPY-CHAOS"],
        ["-I", "INPUT", "-i", "lo", "-j", "VMQPY-CHAOS"],
        ["-I", "OUTPUT", "-o", "lo", "-j", "VMQPY-CHAOS"],
    ]


def test_a_cut_drops_both_directions_in_our_chain() -> None:
    assert drop_args("VMQPY-TEST", "127.0.0.11", "127.0.0.13") == [
        ["-A", "VMQPY-TEST", "-s", "127.0.0.11", "-d", "127.0.0.13", "-j", "DROP"],
        ["-A", "VMQPY-TEST", "-s", "127.0.0.13", "-d", "127.0.0.11", "-j", "DROP"],
    ]


@pytest.mark.parametrize("address", ["10.0.0.1", "192.168.1.2", "::2"])
def test_only_loopback_addresses_are_ever_cut(address: str) -> None:
    with pytest.raises(ValueError, match="not a loopback address"):
        drop_args(CHAIN, "127.0.0.11", address)


@pytest.mark.parametrize("chain", ["VMQPY-TEST", "VMQPY-CHAOS"])
def test_teardown_names_only_its_own_chain(chain: str) -> None:
    other = "VMQPY-CHAOS" if chain == "VMQPY-TEST" else "VMQPY-TEST"
    commands = [jump_args("-D", hook, chain) for hook in (INPUT, OUTPUT)] + [flush_args(chain), *delete_args(chain)]
    assert all(chain in args and other not in args for args in commands)
    assert delete_args(chain) == [["-F", chain], ["-X", chain]]
    assert jump_args("-D", INPUT, chain) == ["-D", "INPUT", "-i", "lo", "-j", chain]
