"""The shapes wire messages and storage rows share: readers raise the store's MessageDecodeError, nothing else."""

from __future__ import annotations

import pytest

import dvv
from dvv.node_clock import NodeClock
from dvv.watermark import Watermark
from vmqpy.metadata.errors import MessageDecodeError
from vmqpy.metadata.fields import array, as_dvv, as_key, as_vv, flat_container
from vmqpy.metadata.objects import StoredObject


def test_array_shapes_are_checked_with_our_error_not_dvvs() -> None:
    assert array([1, 2], "x", multiple=2, length=2) == [1, 2]
    for bad, kwargs in (("no", {}), ([1, 2, 3], {"multiple": 2}), ([1], {"length": 2})):
        with pytest.raises(MessageDecodeError) as caught:
            array(bad, "x", **kwargs)
        assert not isinstance(caught.value, dvv.DecodeError) and str(caught.value).startswith("x: ")


def test_dvv_bytes_decode_to_the_asked_type_only() -> None:
    clock = NodeClock({"a": (3, 0)})
    assert as_dvv(dvv.to_bytes(clock), NodeClock) == clock
    with pytest.raises(MessageDecodeError, match="expected Watermark row, got NodeClock"):
        as_dvv(dvv.to_bytes(clock), Watermark, "Watermark row")
    with pytest.raises(MessageDecodeError, match="bad NodeClock: "):
        as_dvv(b"\x01\x04junk", NodeClock)
    with pytest.raises(MessageDecodeError, match="expected dvv bytes for NodeClock, got str"):
        as_dvv("text", NodeClock)


def test_keys_version_vectors_and_containers() -> None:
    assert as_key(["a", 1, b"b"]) == ("a", 1, b"b")
    with pytest.raises(MessageDecodeError):
        as_key([True])
    assert as_vv(["b", 2, "a", 1], "vv").to_dict() == {"a": 1, "b": 2}
    with pytest.raises(MessageDecodeError, match="duplicate node id"):
        as_vv(["a", 1, "a", 2], "vv")
    obj = StoredObject(((("a", 1), "x"), (("b", 2), [1])), as_vv(["c", 3], "ctx"))
    assert flat_container(obj) == [["a", 1, "x", "b", 2, [1]], ["c", 3]]
