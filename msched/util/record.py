"""`@record`: a frozen dataclass's class syntax, built on `collections.namedtuple`.

Why not dataclasses: msub imports the modules on its path (sbatch_args, config, tag, features,
similarity, perf, constraints) on every submission, and its goal is under 100 ms on top of sbatch.
`import dataclasses` pulls in `inspect` (~20 ms), and each dataclass compiles its generated methods
(~1-2 ms a class); a namedtuple costs ~0.2 ms and `collections` is already loaded by `re`. Modules
that msub never imports keep using dataclasses.

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
"""

from __future__ import annotations

from collections import namedtuple

_NOT_COPIED = ("__dict__", "__weakref__", "__annotations__")


def record(cls: type) -> type:
    """Rebuild `cls` as a namedtuple subclass with the same fields, defaults, methods and docstring."""
    names = list(cls.__dict__.get("__annotations__", {}))
    defaults = []
    for name in names:
        if name in cls.__dict__:
            defaults.append(cls.__dict__[name])
        elif defaults:
            raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
    base = namedtuple(cls.__name__, names, defaults=defaults, module=cls.__module__)
    body = {k: v for k, v in cls.__dict__.items() if k not in names and k not in _NOT_COPIED}
    body["__slots__"] = ()
    body["__annotations__"] = cls.__dict__.get("__annotations__", {})
    checked = body.get("_checked")
    if checked is not None:
        def __new__(subcls, *args, **kwargs):  # noqa: N807 - the constructor of the record
            return checked(base.__new__(subcls, *args, **kwargs))
        body["__new__"] = __new__
    return type(cls.__name__, (base,), body)
