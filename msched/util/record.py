"""`@record`: a frozen dataclass's class syntax, built as a namedtuple is built, without `eval`.

Why not dataclasses: msub imports the modules on its path (sbatch_args, config, tag, features,
similarity, perf, constraints) on every submission, and its goal is under 100 ms on top of sbatch.
`import dataclasses` pulls in `inspect` (~20 ms), and each dataclass compiles its generated methods
(~1-2 ms a class). Modules that msub never imports keep using dataclasses.

    @record
    class GpuRequest:
        count: int
        gpu_type: str | None = None

        def total(self) -> int: ...

Fields are the annotated names in order, defaults their values (none mutable: use tuples, None or a
`types.MappingProxyType`). A record that validates or normalises its values defines `_checked(self)`,
returning the record to keep (raise to refuse); the constructor calls it, `_replace` does not.
Instances are immutable tuples: `r._replace(field=v)` updates, `r._asdict()` converts, `type(r)._fields`
lists the fields. Equal values compare equal across record types (tuple equality); no code here compares
records of different types.

How: the class is what `collections.namedtuple` makes (the same attributes and methods, the same
constructor signature, errors and repr; tests/test_msub_light_path.py compares the two), built in one
class instead of namedtuple's class plus a subclass, and without compiling source. namedtuple compiles
a `lambda _cls, a, b: _tuple_new(_cls, (a, b))` for each class (~55 us, most of a record's ~130 us;
msub defines ~20 records per submission); here the constructor reuses the code of one such lambda
written below for each field count, compiled once into this module's bytecode cache, with the field
names put in as its argument names (`code.replace`): keyword arguments, defaults and error messages
follow the names, exactly as for namedtuple's own. Field counts beyond the table fall back to
namedtuple's way (compiling the lambda).
"""

from __future__ import annotations

try:
    from _collections import _tuplegetter  # namedtuple's own C field accessor
except ImportError:                         # an interpreter without it: what collections.py falls back to
    from operator import itemgetter as _itemgetter

    def _tuplegetter(index: int, doc: str) -> property:
        return property(_itemgetter(index), doc=doc)

_NOT_COPIED = ("__dict__", "__weakref__", "__annotations__")
_tuple_new = tuple.__new__
_function = type(lambda: None)

# one constructor per field count: `_NEW[n]` takes _cls and n arguments (their names replaced per record)
_NEW = (
    lambda _cls: _tuple_new(_cls, ()),
    lambda _cls, a: _tuple_new(_cls, (a,)),
    lambda _cls, a, b: _tuple_new(_cls, (a, b)),
    lambda _cls, a, b, c: _tuple_new(_cls, (a, b, c)),
    lambda _cls, a, b, c, d: _tuple_new(_cls, (a, b, c, d)),
    lambda _cls, a, b, c, d, e: _tuple_new(_cls, (a, b, c, d, e)),
    lambda _cls, a, b, c, d, e, f: _tuple_new(_cls, (a, b, c, d, e, f)),
    lambda _cls, a, b, c, d, e, f, g: _tuple_new(_cls, (a, b, c, d, e, f, g)),
    lambda _cls, a, b, c, d, e, f, g, h: _tuple_new(_cls, (a, b, c, d, e, f, g, h)),
    lambda _cls, a, b, c, d, e, f, g, h, i: _tuple_new(_cls, (a, b, c, d, e, f, g, h, i)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j: _tuple_new(_cls, (a, b, c, d, e, f, g, h, i, j)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k: _tuple_new(_cls, (a, b, c, d, e, f, g, h, i, j, k)),
    lambda _cls, a, b, c, d, e, f, g, h, i, j, k, m: _tuple_new(_cls, (a, b, c, d, e, f, g, h, i, j, k, m)),
)


def _constructor(typename: str, fields: tuple[str, ...], arg_list: str, defaults: tuple):
    """namedtuple's `__new__` for FIELDS: `_tuple_new(_cls, (field1, field2, ...))` under those names."""
    new = None
    if len(fields) < len(_NEW):
        template = _NEW[len(fields)]
        try:
            code = template.__code__.replace(co_varnames=("_cls", *fields), co_name="__new__",
                                             co_qualname=f"{typename}.__new__")
            new = _function(code, template.__globals__, "__new__", defaults or None)
        except (TypeError, ValueError):     # a Python whose code objects take no new names: compile below
            new = None
    if new is None:
        new = eval(f"lambda _cls, {arg_list}: _tuple_new(_cls, ({arg_list}))",   # noqa: S307 - identifiers of a class body
                   {"_tuple_new": _tuple_new, "__builtins__": {}, "__name__": f"namedtuple_{typename}"})
        new.__name__ = "__new__"
        new.__qualname__ = f"{typename}.__new__"
        if defaults:
            new.__defaults__ = defaults
    new.__doc__ = f"Create new instance of {typename}({arg_list})"
    return new


def _check_names(fields: list[str]) -> None:
    """namedtuple's checks that a class body can fail (an annotation is always an identifier, never a
    keyword, and a class's dict holds no name twice), with its message."""
    for name in fields:
        if name.startswith("_"):
            raise ValueError(f"Field names cannot start with an underscore: {name!r}")


@classmethod
def _make(cls, iterable):
    """Make a new record from a sequence or iterable."""
    result = _tuple_new(cls, iterable)
    if len(result) != len(cls._fields):
        raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
    return result


def _replace(self, /, **kwds):
    """Return a new record replacing the named fields with new values."""
    result = self._make(map(kwds.pop, self._fields, self))
    if kwds:
        raise ValueError(f"Got unexpected field names: {list(kwds)!r}")
    return result


def __repr__(self):  # noqa: N807 - the record's repr
    """Return a nicely formatted representation string"""
    return self.__class__.__name__ + "(" + ", ".join(f"{n}={v!r}" for n, v in zip(self._fields, self, strict=False)) + ")"


def _asdict(self):
    """Return a new dict which maps field names to their values."""
    return dict(zip(self._fields, self, strict=False))


def __getnewargs__(self):  # noqa: N807 - used by copy and pickle
    """Return self as a plain tuple.  Used by copy and pickle."""
    return tuple(self)


def record(cls: type) -> type:
    """Rebuild `cls` as a tuple class with namedtuple's attributes and methods, and `cls`'s fields,
    defaults, methods and docstring."""
    typename = cls.__name__
    names = list(cls.__dict__.get("__annotations__", {}))
    defaults = []
    for name in names:
        if name in cls.__dict__:
            defaults.append(cls.__dict__[name])
        elif defaults:
            raise TypeError(f"{typename}: field {name!r} without a default follows one with a default")
    _check_names(names)
    fields = tuple(names)
    arg_list = ", ".join(fields) + ("," if len(fields) == 1 else "")
    new = _constructor(typename, fields, arg_list, tuple(defaults))
    checked = cls.__dict__.get("_checked")
    if checked is not None:
        def __new__(subcls, *args, **kwargs):  # noqa: N807 - the constructor of the record
            return checked(new(subcls, *args, **kwargs))
        __new__.__qualname__ = f"{typename}.__new__"
    body = {"__doc__": f"{typename}({arg_list})", "__slots__": (), "_fields": fields,
            "_field_defaults": dict(zip(fields[len(fields) - len(defaults):], defaults, strict=True)),
            "__new__": __new__ if checked is not None else new, "_make": _make, "_replace": _replace,
            "__repr__": __repr__, "_asdict": _asdict, "__getnewargs__": __getnewargs__, "__match_args__": fields}
    for index, name in enumerate(fields):
        body[name] = _tuplegetter(index, f"Alias for field number {index}")
    body.update((k, v) for k, v in cls.__dict__.items() if k not in names and k not in _NOT_COPIED)
    body["__annotations__"] = cls.__dict__.get("__annotations__", {})
    return type(typename, (tuple,), body)
