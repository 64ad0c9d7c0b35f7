"""The typed shapes of evaluation, declared with pydantic: a recipe's ``evaluation:`` block (launch/eval_spec.py),
the plan an evaluation job carries (plan.py) and the options of an evaluation (options.py).

Strict, as the project reads its inputs: nothing is converted ("32" is not a count, 5 is not a string; an integer
is a number), an unknown key is refused, and ``${VAR}`` in a string is text (no interpolation). A refusal is one
line naming the key and what it takes (:meth:`Shape.parse`, the only place that reads pydantic's errors).
"""

from __future__ import annotations

import types
from typing import Annotated, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

_BOUNDS = {"greater_than_equal": ("ge", ">="), "greater_than": ("gt", ">"), "less_than_equal": ("le", "<="),
           "less_than": ("lt", "<")}


class Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    # appended to every refusal (a plan: how to get one this version reads)
    refusal_hint: ClassVar[str] = ""
    # what a value of this shape may also be written as (a benchmark: its file path)
    short_form: ClassVar[str] = ""

    @classmethod
    def key(cls, where: str, loc: list) -> str:
        """How a refusal names the key at ``loc`` (``where.a.b[0]``)."""
        return where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)

    @classmethod
    def parse(cls, data, where: str):
        """``data`` (a mapping, or JSON text) as this shape, else a ValueError of one line naming the key; checks
        of our own (validators) see ``where`` in their context and raise their own complete line."""
        try:
            if isinstance(data, (str, bytes)):
                return cls.model_validate_json(data, context={"where": where})
            return cls.model_validate(data, context={"where": where})
        except ValidationError as exc:
            # a misspelt key is also a missing one: the unknown key names the typo
            first = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
            raise ValueError(cls._refusal(first, where) + cls.refusal_hint) from None

    @classmethod
    def _refusal(cls, error: dict, where: str) -> str:
        kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
        if kind == "value_error":
            return str(ctx["error"])
        owner, tp, field, loc = _walk(cls, error["loc"])
        key = cls.key(where, loc)
        if error["loc"][-1:] == ("[key]",):
            return f"{key}: a name here is a string (quote it), got {value!r}"
        if kind == "extra_forbidden":
            return f"{key}: unknown key; valid keys: {list(owner.model_fields)}"
        if kind == "json_invalid":
            return f"{key}: not JSON ({error['msg']})"
        if kind == "missing" or (value is None and field is not None and field.is_required()):
            return f"{key} is required: {expected(tp)}"
        if value is None and field is not None:  # null where the shape means "left out": a mistake, not a choice
            return f"{key} is null: give a value or leave the key out for its default"
        if kind == "finite_number":
            return f"{key} must be a finite number, got {value!r}"
        if kind in _BOUNDS:
            name, sign = _BOUNDS[kind]
            return f"{key} must be {sign} {ctx[name]}, got {value!r}"
        if kind == "too_short":
            return f"{key} must not be empty: {expected(tp)}"
        # the field's description, or a list entry's (Annotated[str, Field(description=...)])
        notes = [field] if field else [m for m in get_args(tp)[1:] if isinstance(m, FieldInfo)]
        about = next((f" ({n.description})" for n in notes if n.description), "")
        if kind == "string_pattern_mismatch":
            return f"{key} must match {ctx['pattern']}{about}, got {value!r}"
        return f"{key}: expected {expected(tp)}{about if kind == 'literal_error' else ''}, got {value!r}"


def non_null(tp):
    """``X`` of ``X | None`` and of ``Annotated[X, ...]``; other types as they are."""
    if get_origin(tp) is Annotated:
        return non_null(get_args(tp)[0])
    if get_origin(tp) in (Union, types.UnionType):
        rest = [a for a in get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else Union[tuple(rest)]
    return tp


def _walk(model: type[Shape], loc: tuple):
    """(the shape holding the last key, the type at ``loc``, its field or None for an entry, ``loc`` without the
    union members pydantic names in it)."""
    owner, tp, field, path = model, model, None, []
    for part in loc:
        if part == "[key]":  # a mapping's key (the name before it)
            break
        tp = non_null(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            owner, field = tp, tp.model_fields.get(part)
            path.append(part)
            if field is None:  # an unknown key
                break
            tp = field.annotation
        elif get_origin(tp) in (dict, list, tuple):
            tp, field = get_args(tp)[-1 if get_origin(tp) is dict else 0], None
            path.append(part)
        else:  # a union's member tag: the union is what was expected
            break
    return owner, tp, field, path


def expected(tp) -> str:
    """What a type accepts, in the words of a recipe."""
    tp = non_null(tp)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(expected(a) for a in args)
    if origin is Literal:
        return f"one of {list(args)}"
    if origin in (list, tuple):
        return f"a list, each {expected(args[0])}"
    if origin is dict:
        return f"a mapping NAME: {expected(args[1])}"
    if isinstance(tp, type) and issubclass(tp, Shape):
        return (f"{tp.short_form} or " if tp.short_form else "") + f"a mapping with keys {list(tp.model_fields)}"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, "a value")
