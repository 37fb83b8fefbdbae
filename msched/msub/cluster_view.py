"""What msub knows of the cluster when it decides a submission (`msched.policy.choice.ClusterView`).

- The projected free time per GPU type that the last reorder round published (`read_free_time`), and
  the submit prices of the scarce fast types when the site publishes them (`read_price`).
- The nodes: name, GPU type, GPUs, features and partitions, from one `sinfo` call remembered for ten
  minutes in the user's cache (`cluster_nodes`), so a burst of submissions pays for it once. The node
  sizes are what the feasibility rule needs (a 4-GPU job is never sent to a type of 2-GPU nodes).
- Without a fresh round only: the GPUs free now and the GPUs of pending jobs whose constraint names a
  type, from one `squeue` call (`queue_load`), so a burst spreads over the suitable types instead of
  piling onto the one that looks best on an idle cluster.

Slurm's commands are the siblings of the configured sbatch, never found through PATH. Pure Python
without subprocess (msub's light path): processes are run with `msched.msub.spawn.spawn_and_wait`.
"""

from __future__ import annotations

import os
import time

from msched.config import PRICE_MEASURES
from msched.msub.gpu_request import parse_gres
from msched.util.light import json_load

FREE_TIME_MAX_AGE_S = 900.0          # older published free times are ignored (reorderer down)
CLUSTER_NODES_MAX_AGE_S = 600.0      # how long msub trusts its cached `sinfo` answer
SINFO_FORMAT = "%N|%G|%f|%P"


def read_free_time(config, now: float | None = None) -> tuple[dict[str, float], bool]:  # noqa: ANN001
    """The projected free time per GPU type that the last reorder round published.

    Returns (free_at per canonical type as epoch seconds, fresh). A missing, unreadable or stale file
    means "all types free now" for the choice (fresh=False); its type names are still returned
    (they tell msub which GPU types the cluster has).
    """
    now = time.time() if now is None else now
    try:
        with open(config.free_time_path, encoding="utf-8") as fh:
            data = json_load(fh)
        free_at = {config.canonical_gpu_type(str(k)): float(v) for k, v in dict(data.get("free_at", {})).items()}
        published = float(data.get("time", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return {}, False
    fresh = (now - published) <= FREE_TIME_MAX_AGE_S
    if not fresh:
        free_at = dict.fromkeys(free_at, now)
    return free_at, fresh


def read_plan_end(config, now: float | None = None) -> float | None:  # noqa: ANN001
    """The last reorder round's estimated end of its plan (published beside the free times), or None
    when the file is missing, stale or older than that key (packing then does not judge by it)."""
    now = time.time() if now is None else now
    try:
        with open(config.free_time_path, encoding="utf-8") as fh:
            data = json_load(fh)
        end, published = data.get("plan_end"), float(data.get("time", 0))
        return float(end) if end is not None and now - published <= FREE_TIME_MAX_AGE_S else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def read_price(config, known=None, now: float | None = None) -> tuple[dict[str, float], str]:  # noqa: ANN001
    """The submit prices the last round published beside the free times (config `submit_price`,
    msched.policy.price) and what they measure: ({type: value}, "saving" or "ratio"). The file is
    root's, but msub trusts nothing in it: a missing, stale or malformed entry (too many types, a
    value not a positive finite number, an unknown measure) gives ({}, "saving"), the choice without
    prices, and no error. `known`: the GPU types msub knows (others are dropped)."""
    now = time.time() if now is None else now
    try:
        with open(config.free_time_path, encoding="utf-8") as fh:
            data = json_load(fh)
        if not isinstance(data, dict) or now - float(data.get("time", 0)) > FREE_TIME_MAX_AGE_S:
            return {}, "saving"
        raw, measure = data.get("price"), data.get("price_measure", "saving")
        if not raw or not isinstance(raw, dict) or measure not in PRICE_MEASURES:
            return {}, "saving"                   # (no prices: msub's light path never loads the module)
        canon = {config.canonical_gpu_type(str(k))[:64]: v for k, v in list(raw.items())[:65]}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}, "saving"
    from msched.policy.price import clean_prices

    return clean_prices(canon, known), measure


def _run(argv: list[str]) -> str | None:
    """A Slurm command's standard output, or None when it cannot be run or fails."""
    from msched.msub.spawn import spawn_and_wait

    try:
        status, out, _ = spawn_and_wait(argv, b"", True)
    except OSError:
        return None
    return out.decode("utf-8", "replace") if status == 0 else None


def parse_sinfo_nodes(text: str) -> list[list]:
    """`sinfo -h -N -o "%N|%G|%f|%P"` -> [[name, gres, [features], [partitions]]], one per node."""
    nodes: dict[str, list] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4 or not parts[0]:
            continue
        name, gres, feats, part = parts
        entry = nodes.setdefault(name, [name, gres, [f for f in feats.split(",") if f and f != "(null)"], []])
        part = part.rstrip("*")
        if part and part not in entry[3]:
            entry[3].append(part)
    return list(nodes.values())


def cluster_nodes(config, sbatch: str, known_types: set[str]) -> list[tuple[str, str, int, tuple, tuple]]:  # noqa: ANN001
    """(name, GPU type, GPUs, features, partitions) of each GPU node. The type is the node's typed gres, else
    its feature that names a known GPU type. Cached per user for ten minutes; [] when sinfo fails."""
    from msched.config import user_cache_dir

    cache = os.path.join(user_cache_dir(), "cluster_nodes.json")
    key = os.environ.get("SLURM_CONF", "") + "|" + sbatch
    raw = None
    try:
        with open(cache, encoding="utf-8") as fh:
            cached = json_load(fh)
        if cached.get("key") == key and time.time() - float(cached["time"]) < CLUSTER_NODES_MAX_AGE_S:
            raw = cached["nodes"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if raw is None:
        out = _run([os.path.join(os.path.dirname(sbatch), "sinfo"), "-h", "-N", "-o", SINFO_FORMAT])
        if out is None:
            return []
        raw = parse_sinfo_nodes(out)
        try:
            import json

            from msched.util.files import write_atomically

            os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
            write_atomically(cache, json.dumps({"key": key, "time": time.time(), "nodes": raw}))
        except OSError:
            pass                                      # a cache that cannot be written is no error
    nodes = []
    for name, gres, feats, parts in raw:
        gpus = [(t, n) for t, n in parse_gres(gres.split("(")[0]) if n > 0] if gres and gres != "(null)" else []
        if not gpus:
            continue
        typed = next((config.canonical_gpu_type(t) for t, _ in gpus if t), None)
        canon = [config.canonical_gpu_type(f) for f in feats]
        gpu_type = typed or next((f for f in canon if f in known_types), None)
        if gpu_type:
            nodes.append((name, gpu_type, sum(n for _, n in gpus), tuple(feats), tuple(parts)))
    return nodes


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list (`n[3-5,9],m1` -> `n3`)."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist
    if "[" not in head:
        return head
    prefix, _, rest = head.partition("[")
    return prefix + rest.split(",")[0].split("-")[0].rstrip("]")


def queue_load(config, sbatch: str,  # noqa: ANN001
               nodes: list[tuple[str, str, int, tuple, tuple]]) -> tuple[dict[str, int], dict[str, float]]:
    """(free GPUs now per type, GPUs of pending jobs per type their constraint names) from one squeue.

    A pending job whose constraint names several types counts a share on each; one naming none is not
    counted (Slurm gives it whatever frees first)."""
    from msched.slurm.feature_expr import names_gpu_type

    total: dict[str, int] = {}
    node_type = {}
    for name, t, g, _f, _p in nodes:
        total[t] = total.get(t, 0) + g
        node_type[name] = t
    out = _run([os.path.join(os.path.dirname(sbatch), "squeue"), "-h", "-t", "PD,R", "-o", "%T|%D|%b|%N|%f"])
    if out is None:
        return {}, {}
    known = set(total)

    def as_type(name: str) -> str | None:
        c = config.canonical_gpu_type(name)
        return c if c in known else None

    busy: dict[str, int] = {}
    pending: dict[str, float] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5:
            continue
        state, count, gres, nodelist, feats = parts
        per_node = sum(n for _, n in parse_gres(gres)) if gres and gres != "N/A" else 0
        if per_node <= 0:
            continue
        gpus = per_node * max(1, int(count) if count.isdigit() else 1)
        if state == "RUNNING":
            t = node_type.get(first_host(nodelist))
            if t in total:
                busy[t] = busy.get(t, 0) + gpus
        elif state == "PENDING" and feats and feats != "(null)":
            try:
                named = names_gpu_type(feats, as_type)
            except ValueError:
                continue
            for t in named:
                pending[t] = pending.get(t, 0.0) + gpus / len(named)
    return {t: max(0, total[t] - busy.get(t, 0)) for t in total}, pending
