"""JSON and CSV reading and `lru_cache` for msub's light path, without the `json`, `csv` and `functools` packages.

`json.decoder` and `csv.py` each import `re` (with `enum`, `re._parser`, `re._compiler`...), which costs msub
~6 ms of CPU on every submission (interpreter start to exit, bench/bench_msub.py; BENCHMARKS, predict13), a
fifth of its own CPU, while the parsing itself is done by the C modules `_json` and `_csv` that both
packages wrap. These functions call the same C code directly:

- `json_loads(text)` is `json.loads(text)` for a str: the C scanner that `json.loads` uses, with the same
  settings (strict, dicts, float, int, NaN/Infinity). Whatever it does not read cleanly (an error, a BOM,
  extra data) is handed to `json.loads` itself, so every error is `json.loads`'s own, word for word.
- `DictReader(lines)` reads as `csv.DictReader(lines)` does with its defaults (the excel dialect: `_csv`'s
  own defaults; field names from the first row; missing fields None, extra fields under the key None).
- `lru_cache(maxsize)` is `functools.lru_cache(maxsize)` (the same C cache) without importing functools,
  which imports the collections package, reprlib and types (~2-3 ms of msub's CPU with msched.util.record's
  records, which no longer need collections either; BENCHMARKS, predict14).

Writing (json.dumps, csv.writer) is off the hot path and uses the packages.
"""

from __future__ import annotations

from msched.util.record import record

try:
    from _csv import reader as _csv_reader
except ImportError:           # an interpreter without the C module: csv.py's reader is the same one
    from csv import reader as _csv_reader
try:
    from _json import make_scanner as _make_scanner
except ImportError:
    _make_scanner = None

_JSON_SPACE = " \t\n\r"       # json.decoder.WHITESPACE, `[ \t\n\r]*`


class _JsonSettings:
    """What the C scanner reads from a `json.JSONDecoder()` with no arguments."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__


_scan = _make_scanner(_JsonSettings()) if _make_scanner is not None else None


def json_loads(text: str) -> object:
    """`json.loads(text)` for a str, without importing `json` unless the text is not clean JSON."""
    if _scan is not None and isinstance(text, str):
        try:
            value, end = _scan(text, len(text) - len(text.lstrip(_JSON_SPACE)))
        except Exception:  # noqa: BLE001 - json.loads below gives the error its own words
            pass
        else:
            if not text[end:].strip(_JSON_SPACE):
                return value
    import json

    return json.loads(text)


def json_load(fh) -> object:  # noqa: ANN001 - a text file
    """`json.load(fh)`: the file's text through `json_loads`."""
    return json_loads(fh.read())


class DictReader:
    """`csv.DictReader(f)` with its defaults (fieldnames from the first row, restkey and restval None,
    the excel dialect) on `_csv.reader`; the same code as the standard library's, less `csv.py`'s import."""

    def __init__(self, f) -> None:  # noqa: ANN001 - any iterable of lines
        self.reader = _csv_reader(f)
        self._fieldnames: list[str] | None = None
        self.line_num = 0

    def __iter__(self) -> DictReader:
        return self

    @property
    def fieldnames(self) -> list[str] | None:
        if self._fieldnames is None:
            try:
                self._fieldnames = next(self.reader)
            except StopIteration:
                pass
        self.line_num = self.reader.line_num
        return self._fieldnames

    def __next__(self) -> dict:
        if self.line_num == 0:
            self.fieldnames             # noqa: B018 - reads the header, as csv.DictReader does
        row = next(self.reader)
        self.line_num = self.reader.line_num
        while row == []:                # csv.DictReader skips empty rows
            row = next(self.reader)
        names = self.fieldnames or []
        d = dict(zip(names, row, strict=False))     # lengths may differ (below)
        if len(names) < len(row):
            d[None] = row[len(names):]
        elif len(names) > len(row):
            for key in names[len(row):]:
                d[key] = None
        return d


# --------------------------------------------------------------------------- functools.lru_cache
try:
    from _functools import _lru_cache_wrapper
except ImportError:           # an interpreter without the C cache: functools' own
    _lru_cache_wrapper = None


@record
class CacheInfo:
    """functools' CacheInfo, what `cache_info()` returns."""

    hits: int
    misses: int
    maxsize: int
    currsize: int


def lru_cache(maxsize: int = 128):
    """`functools.lru_cache(maxsize)`, the same C cache, without importing functools.

    msub's path needs only this decorator from functools (see the module's docstring).
    `_functools._lru_cache_wrapper` is the cache `functools.lru_cache` itself wraps; this sets what
    `functools.update_wrapper` sets (`__wrapped__`, name, docstring...) and `cache_parameters()`."""
    if _lru_cache_wrapper is None:
        from functools import lru_cache as functools_lru_cache
        return functools_lru_cache(maxsize)

    def decorate(fn):
        wrapper = _lru_cache_wrapper(fn, maxsize, False, CacheInfo)
        wrapper.cache_parameters = lambda: {"maxsize": maxsize, "typed": False}
        for attr in ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__", "__type_params__"):
            if hasattr(fn, attr):
                setattr(wrapper, attr, getattr(fn, attr))
        wrapper.__dict__.update(fn.__dict__)
        wrapper.__wrapped__ = fn
        return wrapper
    return decorate
