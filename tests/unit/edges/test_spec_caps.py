"""Every field a tenant writes into a RunnerGroup spec has a cap, and past it the whole spec
is refused with a message naming the field and the cap (issue 36, one bounded edge)."""

from __future__ import annotations

import types
from datetime import datetime
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from annotated_types import Ge, Gt, Le, Lt, MaxLen
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from gitea_runner_operator.api import caps
from gitea_runner_operator.api.forge import ForgejoJob, ForgejoRunner
from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerGroupSpec, parse_spec
from tests.support.builders import spec_with


def _uncapped(annotation: Any, metadata: list[Any], where: str) -> list[str]:
    """The places under ``where`` whose type has no cap: a string without a maximum length,
    a list or dict without a maximum count, an int without both bounds, a free-form object
    without a byte and depth bound."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *more = get_args(annotation)
        return _uncapped(inner, [*metadata, *more], where)
    if origin in (Union, types.UnionType):
        found: list[str] = []
        for arm in get_args(annotation):
            if arm is not type(None):
                found += _uncapped(arm, metadata, where)
        return found
    flat = [
        m for item in metadata for m in (item.metadata if isinstance(item, FieldInfo) else [item])
    ]
    has = lambda kind: any(isinstance(m, kind) for m in flat)  # noqa: E731
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return walk(annotation, where)
    if annotation is str:
        return [] if has(MaxLen) else [f"{where}: str without max_length"]
    if annotation in (bool, datetime) or (
        isinstance(annotation, type) and issubclass(annotation, str)
    ):
        return []  # bool, a time, and str enums: a fixed size or set of values
    if annotation is int:
        low, high = has(Ge) or has(Gt), has(Le) or has(Lt)
        return [] if low and high else [f"{where}: int without both bounds"]
    if origin in (list, tuple, frozenset, set):
        own = [] if has(MaxLen) else [f"{where}: {origin.__name__} without max_length"]
        return own + _uncapped(get_args(annotation)[0], [], f"{where}[]")
    if origin is dict:
        bounded = any(
            isinstance(m, AfterValidator) and isinstance(m.func, caps.JsonBound) for m in flat
        )
        return [] if bounded else [f"{where}: object without a byte and depth bound"]
    return [f"{where}: {annotation!r} is a type this test does not know how to bound"]


def walk(model: type[BaseModel], where: str = "spec") -> list[str]:
    found: list[str] = []
    for name, field in model.model_fields.items():
        alias = field.alias or name
        found += _uncapped(field.annotation, list(field.metadata), f"{where}.{alias}")
    return found


def test_every_field_a_tenant_writes_has_a_cap():
    assert walk(RunnerGroupSpec) == []


@pytest.mark.parametrize("model", [ActionJob, ActionRunner, ForgejoJob, ForgejoRunner])
def test_every_field_of_a_listed_job_or_runner_has_a_cap(model):
    assert walk(model, model.__name__) == []


def test_the_walker_finds_a_field_without_a_cap():
    class Loose(BaseModel):
        note: str
        items: list[str]
        count: int
        blob: dict[str, Any]

    assert walk(Loose, "x") == [
        "x.note: str without max_length",
        "x.items: list without max_length",
        "x.items[]: str without max_length",
        "x.count: int without both bounds",
        "x.blob: object without a byte and depth bound",
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"labels": [f"l{i}" for i in range(caps.SPEC_LABELS_MAX + 1)]},
            f"spec.labels: List should have at most {caps.SPEC_LABELS_MAX} items",
        ),
        (
            {"labels": ["x" * (caps.LABEL_MAX_CHARS + 1)]},
            f"spec.labels.0: String should have at most {caps.LABEL_MAX_CHARS} characters",
        ),
        (
            {"gitea": {"url": "https://g.example/" + "a" * caps.URL_MAX_CHARS}},
            f"spec.gitea.url: String should have at most {caps.URL_MAX_CHARS} characters",
        ),
        (
            {"image": "i" * (caps.IMAGE_MAX_CHARS + 1)},
            f"spec.image: String should have at most {caps.IMAGE_MAX_CHARS} characters",
        ),
        (
            {"maxActiveRunners": caps.RUNNERS_MAX + 1},
            f"spec.maxActiveRunners: Input should be less than or equal to {caps.RUNNERS_MAX}",
        ),
        (
            {"pollInterval": "1" * 100 + "s"},
            f"spec.pollInterval: String should have at most {caps.DURATION_MAX_CHARS} characters",
        ),
        ({"org": "o" * 5000}, "spec.org: String should have at most 100 characters"),
    ],
)
def test_past_a_cap_the_spec_is_refused_naming_field_and_cap(changes, message):
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec_with(**changes))
    assert message in err.value.message


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_template_nested_past_the_cap_is_refused_without_a_recursion_error():
    template = {"metadata": {"annotations": {}}, "spec": _nested(100_000)}
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec_with(template=template))
    assert err.value.message == (
        f"spec.template: nests deeper than {caps.TEMPLATE_MAX_DEPTH} levels"
    )


def test_a_template_past_the_byte_cap_is_refused():
    big = {"spec": {"containers": [{"name": "sidecar", "args": ["x" * caps.TEMPLATE_MAX_BYTES]}]}}
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec_with(template=big))
    assert err.value.message == (
        f"spec.template: holds more than {caps.TEMPLATE_MAX_BYTES} bytes of JSON"
    )


def test_a_template_within_the_caps_is_kept_as_written():
    template = {"spec": {"nodeSelector": {"pool": "ci"}, "containers": [{"name": "runner"}]}}
    assert parse_spec(spec_with(template=template)).template == template


def _crd_spec() -> dict[str, Any]:
    import yaml

    from tests.support import REPO_ROOT

    crd = yaml.safe_load((REPO_ROOT / "manifests" / "crd.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _limits(metadata: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for item in metadata:
        flat += item.metadata if isinstance(item, FieldInfo) else [item]
    return flat


def _stricter(model: type[BaseModel], schema: dict[str, Any], where: str) -> list[str]:
    """Places where the model refuses what the CRD's schema lets the API server admit."""
    found: list[str] = []
    props = schema.get("properties") or {}
    for name, field in model.model_fields.items():
        prop, here = props.get(field.alias or name), f"{where}.{field.alias or name}"
        if prop is None:
            continue
        annotation = field.annotation
        union = get_origin(annotation) in (Union, types.UnionType)
        checks: list[tuple[list[Any], dict[str, Any], str]] = []
        for arm in get_args(annotation) if union else (annotation,):
            metadata = list(field.metadata)
            if get_origin(arm) is Annotated:
                arm, *more = get_args(arm)
                metadata += more
            checks.append((_limits(metadata), prop, here))
            if isinstance(arm, type) and issubclass(arm, BaseModel):
                found += _stricter(arm, prop, here)
            if get_origin(arm) is list and "items" in prop:
                (item,) = get_args(arm)
                if get_origin(item) is Annotated:
                    checks.append((_limits(list(get_args(item)[1:])), prop["items"], f"{here}[]"))
        for limits, rule, place in checks:
            cap = rule.get("maxItems", rule.get("maxLength"))
            for m in limits:
                if isinstance(m, MaxLen) and cap is not None and m.max_length < cap:
                    found.append(place)
                if isinstance(m, Le) and "maximum" in rule and m.le < rule["maximum"]:
                    found.append(place)
    return found


def test_no_cap_is_stricter_than_the_crd_that_admitted_the_spec():
    assert _stricter(RunnerGroupSpec, _crd_spec(), "spec") == []
