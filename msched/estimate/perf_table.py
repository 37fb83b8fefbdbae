"""The performance table: measured iteration times per (model, GPU type, GPU count, batch size, precision).

CSV format (DESIGN, a stable interface): `model,gpu_type,num_gpus,batch_size,precision,iter_ms[,source]`,
`batch_size` per GPU. The same table serves as the policy's knowledge (`--perf`) and as the simulator's
ground truth (`--truth`). Pure Python: msub reads it on its hot path.

Fill rules (DESIGN, policy point 4), in `PerfTable.iter_ms`:
- batch size: iteration time scales linearly from the nearest measured per-GPU batch size
  (constant samples/s);
- GPU count: the exact count when measured; a count above the largest measured keeps that count's
  per-GPU throughput (same iteration time at the same per-GPU batch); otherwise the nearest measured
  count below it (or the smallest one);
- a (model, type) pair without any row is unknown: `None`.
"""

from __future__ import annotations

import io
import math
import os
from _collections import defaultdict  # collections.defaultdict itself, without the collections package

from msched.util.light import DictReader
from msched.util.record import record

TYPE_CHECKING = False       # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:           # for annotations only: importing collections.abc costs msub ~1 ms (predict14)
    from collections.abc import Iterable

COLUMNS = ("model", "gpu_type", "num_gpus", "batch_size", "precision", "iter_ms")
DEFAULT_PRECISION = "float"


class PerfTableError(ValueError):
    """A performance table that cannot be read; the message names the file and row."""


@record
class PerfRow:
    model: str
    gpu_type: str
    num_gpus: int
    batch_size: int
    precision: str
    iter_ms: float
    source: str = ""


class PerfTable:
    """Iteration times indexed by (model, gpu_type, precision) for fast lookups."""

    def __init__(self, rows: Iterable[PerfRow]):
        self.rows: list[PerfRow] = list(rows)
        self._index: dict[tuple[str, str, str], list[PerfRow]] = defaultdict(list)
        for row in self.rows:
            self._index[(row.model, row.gpu_type, row.precision)].append(row)
        self._models = frozenset(row.model for row in self.rows)   # has_model is on every round's hot path
        self._cache: dict[tuple, float | None] = {}

    # ----------------------------------------------------------------- loading
    @classmethod
    def load(cls, path: str | os.PathLike) -> PerfTable:
        try:
            with open(path, newline="") as fh:
                return cls(_parse_rows(DictReader(fh), str(path)))
        except OSError as exc:
            raise PerfTableError(f"cannot read performance table {path}: {exc.strerror}") from exc

    def to_csv(self) -> str:
        """The table as CSV text (with the source column), rows sorted by model, type, precision, GPUs, batch."""
        return rows_csv(sorted(self.rows, key=lambda r: (r.model, r.gpu_type, r.precision, r.num_gpus, r.batch_size)))

    def write(self, path: str | os.PathLike) -> None:
        with open(path, "w", newline="") as fh:
            fh.write(self.to_csv())

    # ----------------------------------------------------------------- queries
    def models(self) -> set[str]:
        return {r.model for r in self.rows}

    def gpu_types(self) -> list[str]:
        return sorted({r.gpu_type for r in self.rows})

    def has_model(self, model: str) -> bool:
        return model in self._models

    def types_for(self, model: str, precision: str = DEFAULT_PRECISION) -> list[str]:
        """GPU types with at least one measurement of this model at this precision."""
        return sorted({t for (m, t, p) in self._index if m == model and p == precision})

    def iter_ms(
        self, model: str, gpu_type: str, num_gpus: int, batch_size: int, precision: str = DEFAULT_PRECISION
    ) -> float | None:
        """Milliseconds per training iteration, by DESIGN's fill rules; None where nothing is measured."""
        key = (model, gpu_type, num_gpus, batch_size, precision)
        if key in self._cache:
            return self._cache[key]
        rows = self._index.get((model, gpu_type, precision))
        value = _fill(rows, num_gpus, batch_size) if rows else None
        self._cache[key] = value
        return value

    def nearest_row(self, model: str, gpu_type: str, num_gpus: int, batch_size: int,
                    precision: str = DEFAULT_PRECISION) -> PerfRow | None:
        """The measured row `iter_ms` scales from (None where nothing is measured): a residual taken at
        that row compares like with like, where one taken at the scaled figure would carry the linear
        batch rule's own error."""
        rows = self._index.get((model, gpu_type, precision))
        return _nearest(rows, num_gpus, batch_size) if rows else None

    def runtime_s(
        self, model: str, gpu_type: str, num_gpus: int, batch_size: int, iterations: float,
        precision: str = DEFAULT_PRECISION,
    ) -> float | None:
        ms = self.iter_ms(model, gpu_type, num_gpus, batch_size, precision)
        return None if ms is None else iterations * ms / 1000.0

    def speeds(self, model: str, num_gpus: int = 1, batch_size: int | None = None,
               precision: str = DEFAULT_PRECISION) -> dict[str, float]:
        """Iteration time per GPU type for one model (only types with data)."""
        out = {}
        for t in self.types_for(model, precision):
            bs = batch_size or self._index[(model, t, precision)][0].batch_size
            ms = self.iter_ms(model, t, num_gpus, bs, precision)
            if ms is not None:
                out[t] = ms
        return out

    def merged_with(self, newer: Iterable[PerfRow]) -> PerfTable:
        """This table with `newer` rows replacing rows of the same (model, type, count, batch, precision)."""
        newer = list(newer)
        replaced = {(r.model, r.gpu_type, r.num_gpus, r.batch_size, r.precision) for r in newer}
        kept = [r for r in self.rows if (r.model, r.gpu_type, r.num_gpus, r.batch_size, r.precision) not in replaced]
        return PerfTable(kept + newer)


def _fill(rows: list[PerfRow], num_gpus: int, batch_size: int) -> float:
    nearest = _nearest(rows, num_gpus, batch_size)
    return nearest.iter_ms * batch_size / nearest.batch_size


def _nearest(rows: list[PerfRow], num_gpus: int, batch_size: int) -> PerfRow:
    """The measured row the fill rules start from: the GPU count (else the largest below, else the
    smallest), then the nearest batch size on a log scale."""
    counts = sorted({r.num_gpus for r in rows})
    if num_gpus in counts:
        count = num_gpus
    else:
        below = [c for c in counts if c <= num_gpus]
        count = below[-1] if below else counts[0]
    at_count = [r for r in rows if r.num_gpus == count]
    return min(at_count, key=lambda r: (abs(math.log(r.batch_size / batch_size)), r.batch_size))


def _parse_rows(reader: DictReader, name: str) -> list[PerfRow]:
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise PerfTableError(f"{name}: missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}[,source]")
    rows = []
    for lineno, rec in enumerate(reader, start=2):
        try:
            row = PerfRow(
                model=rec["model"].strip(),
                gpu_type=rec["gpu_type"].strip().lower(),
                num_gpus=int(rec["num_gpus"]),
                batch_size=int(rec["batch_size"]),
                precision=(rec["precision"] or DEFAULT_PRECISION).strip(),
                iter_ms=float(rec["iter_ms"]),
                source=(rec.get("source") or "").strip(),
            )
        except (TypeError, ValueError) as exc:
            raise PerfTableError(f"{name} line {lineno}: {exc}") from exc
        if row.num_gpus < 1 or row.batch_size < 1 or not row.iter_ms > 0 or not row.model or not row.gpu_type:
            raise PerfTableError(f"{name} line {lineno}: num_gpus, batch_size and iter_ms must be positive")
        rows.append(row)
    return rows


def rows_csv(rows: Iterable[PerfRow]) -> str:
    """Rows in the performance-table CSV format (with the source column), in the order given."""
    import csv

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*COLUMNS, "source"])
    for r in rows:
        w.writerow([r.model, r.gpu_type, r.num_gpus, r.batch_size, r.precision, f"{r.iter_ms:.6g}", r.source])
    return buf.getvalue()
