"""The records of the compiled rooms build themselves in native code: every (not frozen) dataclass of a module in
vmqpy.native.COMPILED writes its `__init__` out. `dataclasses` makes the one it generates with `exec`, so in the
compiled build it stays interpreted Python; on the message path (a PUBLISH, its `Message`, the `RouteResult`, the
`Outgoing`, two PUBACKs) that was a fifth of the CPU of a paced QoS 1 message (docs/performance.md, "Dataclass
initialisers").

Pure (VMQPY_PURE=1, how the unit tests run a second time): each written-out `__init__` takes the parameters the
generated one would, in its order, with its defaults (a `default_factory` field: None, and the factory's value
when left out). Compiled: none of them is a Python function.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import types
from typing import Any

import pytest

from vmqpy import BUILD, native
from vmqpy.mqtt.packets import Properties


def _records() -> list[type]:
    out = []
    for name in native.COMPILED:
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if isinstance(obj, type) and obj.__module__ == name and dataclasses.is_dataclass(obj) \
                    and not obj.__dataclass_params__.frozen and dataclasses.fields(obj):  # type: ignore[attr-defined]
                out.append(obj)
    return out


RECORDS = _records()


def test_the_compiled_rooms_have_records() -> None:
    names = {r.__name__ for r in RECORDS}
    assert {"Message", "Publish", "Puback", "RouteResult", "Outgoing", "ConnectionState", "Properties"} <= names


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{r.__module__}.{r.__name__}")
def test_a_record_writes_its_init_out(record: type) -> None:
    init = record.__dict__.get("__init__")
    assert init is not None
    if BUILD.compiled and record.__module__ in native.COMPILED:
        assert not isinstance(init, types.FunctionType), "compiled, but its __init__ is interpreted"
        return
    assert init.__code__.co_filename != "<string>", "the dataclass generated it: write it out in the class"
    fields = [f for f in dataclasses.fields(record) if f.init]
    params = list(inspect.signature(init).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    required: dict[str, Any] = {}
    for f, p in zip(fields, params, strict=True):
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        if f.default is not dataclasses.MISSING:
            assert p.default == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert p.default is None, f.name
        else:
            assert p.default is inspect.Parameter.empty, f.name
            required[f.name] = object()
    built = record(**required)
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            value, expected = getattr(built, f.name), f.default_factory()
            assert value == expected or (type(value) is type(expected) and "__eq__" not in vars(type(expected))), \
                f.name
        elif f.default is not dataclasses.MISSING:
            assert getattr(built, f.name) == f.default, f.name
        else:
            assert getattr(built, f.name) is required[f.name], f.name


def _declared(record: type) -> tuple[list[str], set[str]]:
    """The fields of `record` as its source declares them (the annotated names of its class body but the
    ClassVars), and its ClassVars."""
    source = native.source_path(record.__module__).read_text()
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == record.__name__)
    annotated = [(stmt.target.id, "ClassVar" in ast.unparse(stmt.annotation)) for stmt in node.body
                 if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)]
    return [name for name, constant in annotated if not constant], {name for name, constant in annotated if constant}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{r.__module__}.{r.__name__}")
def test_a_record_has_the_fields_its_source_declares(record: type) -> None:
    """A written-out `__init__` takes the declared fields. Compiled, mypyc hands `dataclasses` a ClassVar (a
    packet's `type`) as a field too, which no `__init__` takes: `dataclasses.replace` on such a record fails in
    the compiled build only (a client certificate's CONNECT got "Unspecified error"), so the node builds those
    records again by hand (vmqpy.broker.machine.protocol). Any other attribute of a class body is annotated."""
    fields, constants = _declared(record)
    assert [f.name for f in dataclasses.fields(record) if f.name not in constants] == fields


def test_replace_builds_a_record_without_constants_again() -> None:
    """The writer's topic alias: `dataclasses.replace` on `Properties`, which has no ClassVar (both builds)."""
    assert dataclasses.replace(Properties(content_type="t"), topic_alias=7) == Properties(content_type="t",
                                                                                          topic_alias=7)
