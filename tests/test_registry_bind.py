"""A tool call's arguments: taken as they are when they already are what the signature declares,
else through the pydantic model, with one set of rules (the fast path never accepts what pydantic
would change or refuse)."""

from __future__ import annotations

import random
import typing
from typing import Annotated, Any, Literal

import pytest
from pydantic import ValidationError

from rlmedic.tools.registry import REGISTRY, Param, Registry, ToolContext, _as_declared, _bare

#: Values of many shapes, some of the declared type and some not: what a model or a client may send.
SAMPLES: list[Any] = [
    None, True, False, 0, 1, -1, 5, 9, 10, 20, 21, 1000, 1001, 100_000, 100_001, 0.5, 5.0, float("nan"),
    "", "x", "5", "true", "logs/train.log", " a ", "\udcff", "é" * 3, "a" * 200,
    [], ["a"], ["a", "b"], ["a", "b", "c"], [1, 2], ["a", 1], ("a", "b"), [None],
    {}, {"verl": "0.4.1"}, {"verl": 1}, {1: "a"}, b"bytes",
    "doc", "card", "commit", "web",
]


def _cases(seed: int, n: int) -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(seed)
    tools = REGISTRY.tools()
    out = []
    for _ in range(n):
        entry = rng.choice(tools)
        names = list(entry.fields)
        chosen = rng.sample(names, rng.randint(0, len(names)))
        out.append((entry.name, {name: rng.choice(SAMPLES) for name in chosen}))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_fast_path_accepts_only_what_pydantic_takes_unchanged(seed: int) -> None:
    accepted = 0
    for name, arguments in _cases(seed, 1500):
        entry = REGISTRY.get(name)
        assert entry is not None
        fast = (all(_as_declared(entry.fields[k][0], v) for k, v in arguments.items())
                and all(k in arguments or default is not ... for k, (_, default) in entry.fields.items()))
        try:
            model = entry.params.model_validate(arguments)
        except ValidationError:
            assert not fast, (name, arguments)  # pydantic refuses it: the fast path must not take it
            with pytest.raises(ValidationError):
                entry.bind(arguments)
            continue
        expected = {k: getattr(model, k) for k in entry.fields}
        if fast:
            accepted += 1
            bound = entry.bind(arguments)
            assert bound == expected, (name, arguments)
            assert [type(v) for v in bound.values()] == [type(v) for v in expected.values()], (name, arguments)
        else:
            assert entry.bind(arguments) == expected
    assert accepted > 100  # the property was exercised, not vacuous


def test_what_the_fast_path_does_not_take_pydantic_converts_or_refuses() -> None:
    search = REGISTRY.get("search_docs")
    assert search is not None
    assert search.bind({"query": "oom", "k": "5"})["k"] == 5  # a model's string for an int
    assert search.bind({"query": "oom"}) == {"query": "oom", "k": 5, "kind": None}  # defaults filled in
    for bad in ({"query": "oom", "k": 0}, {"query": ""}, {"query": "oom", "kind": "web"}, {"query": "oom", "x": 1}, {}):
        with pytest.raises(ValidationError):
            search.bind(bad)


def test_a_registry_call_reports_bad_arguments_in_one_line(tmp_path: Any) -> None:
    ctx = ToolContext.for_roots([tmp_path])
    result = REGISTRY.call("search_docs", {"query": "oom", "k": 99}, ctx)
    assert not result.ok and result.error.startswith("search_docs: bad arguments: k:") and "\n" not in result.error


def test_param_bounds_become_the_schema_a_model_reads() -> None:
    registry = Registry()

    @registry.register
    def pick(ctx: ToolContext, n: Annotated[int, Param(ge=1, le=3, description="How many.")] = 1,
             names: Annotated[list[str], Param(min_length=1, max_length=2, description="Which.")] = ["a"],
             mode: Literal["a", "b"] | None = None) -> int:
        """Pick some."""
        return n

    entry = registry.get("pick")
    assert entry is not None
    props = entry.schema["properties"]
    assert props["n"] == {"default": 1, "description": "How many.", "maximum": 3, "minimum": 1, "type": "integer"}
    assert props["names"]["minItems"] == 1 and props["names"]["maxItems"] == 2
    assert entry.takes_many("names") and not entry.takes_many("n")
    assert _bare(entry.fields["n"][0]) is int and typing.get_origin(_bare(entry.fields["mode"][0])) is not None
    assert not _as_declared(entry.fields["n"][0], 4) and _as_declared(entry.fields["n"][0], 3)
    assert not _as_declared(entry.fields["names"][0], ["a", "b", "c"])
