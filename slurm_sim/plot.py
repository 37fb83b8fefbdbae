"""The PNG of `msched sim --plot`: per policy, GPU utilisation per type over time and a Gantt-like view.

matplotlib with the Agg backend (no display needed). Utilisation per type is a step function built from
the jobs' starts and ends; the Gantt view draws one horizontal line per job (y = start order), coloured
by the GPU type it ran on, so a policy that leaves a type idle or strands long jobs on slow types shows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from slurm_sim.cluster import ClusterSpec
from slurm_sim.metrics import JobOutcome


def utilisation_series(outcomes: Sequence[JobOutcome], gpu_type: str, total: int) -> tuple[list[float], list[float]]:
    """(times, fraction busy) step points for one GPU type."""
    deltas: dict[float, int] = {}
    for o in outcomes:
        if o.gpu_type != gpu_type or o.start is None or o.end is None:
            continue
        deltas[o.start] = deltas.get(o.start, 0) + o.num_gpus
        deltas[o.end] = deltas.get(o.end, 0) - o.num_gpus
    times, values, busy = [], [], 0
    for t in sorted(deltas):
        busy += deltas[t]
        times.append(t)
        values.append(busy / total if total else 0.0)
    return times, values


def plot_runs(path: str | os.PathLike, runs: Sequence[tuple[str, Sequence[JobOutcome]]], cluster: ClusterSpec,
              title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    types = cluster.gpu_types
    totals = cluster.gpus_total
    colours = {t: plt.get_cmap("tab10")(i % 10) for i, t in enumerate(types)}
    n = max(1, len(runs))
    fig, axes = plt.subplots(n, 2, figsize=(14, 2.6 * n + 0.8), squeeze=False)
    t_end = max((o.end for _, outs in runs for o in outs if o.end is not None), default=1.0)
    scale, unit = (3600.0, "h") if t_end > 3 * 3600 else (60.0, "min") if t_end > 180 else (1.0, "s")
    for row, (policy, outs) in enumerate(runs):
        ax_u, ax_g = axes[row]
        for t in types:
            xs, ys = utilisation_series(outs, t, totals.get(t, 0))
            if xs:
                ax_u.step([x / scale for x in xs], ys, where="post", color=colours[t], label=t, linewidth=1)
        ax_u.set_ylim(0, 1.05)
        ax_u.set_xlim(0, t_end / scale)
        ax_u.set_ylabel(f"{policy}\nbusy fraction")
        done = sorted((o for o in outs if o.start is not None and o.end is not None), key=lambda o: (o.start, o.end))
        segs = [((o.start / scale, k), (o.end / scale, k)) for k, o in enumerate(done)]
        cols = [colours.get(o.gpu_type or "", "grey") for o in done]
        width = max(0.3, min(3.0, 400.0 / max(1, len(done))))
        ax_g.add_collection(LineCollection(segs, colors=cols, linewidths=width))
        ax_g.set_xlim(0, t_end / scale)
        ax_g.set_ylim(-1, max(1, len(done)))
        ax_g.set_ylabel("jobs (by start)")
        if row == 0:
            ax_u.set_title("GPU utilisation per type")
            ax_g.set_title("jobs over time, coloured by GPU type")
            ax_u.legend(loc="lower left", fontsize="small", ncol=min(6, len(types)))
        if row == n - 1:
            ax_u.set_xlabel(f"time ({unit})")
            ax_g.set_xlabel(f"time ({unit})")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
