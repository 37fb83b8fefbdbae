"""The shipped torchvision profile table (`msched/data/torchvision_features.json`), read as plain dicts.

scripts/build_reference_profiles.py precomputes every torchvision classification model's profile, so
naming one costs a JSON lookup: no torch, and no `msched.models.profiler`. msub reads this on every submission;
`msched.models.profile_cache` wraps the same entries in `Profile` objects for everyone else.

msub reads the table (93 KB of JSON, ~0.7 ms of CPU to parse) through a `marshal` copy in the calling
user's cache (msched.config.user_cache_dir; ~0.3 ms): the copy holds the JSON file's bytes beside the
parsed table and is used only when they equal the file's bytes as read now (and marshal's format is this
interpreter's), so it is never stale, whatever the file's times say. It is used only when the calling
user owns it and no one else can write it (the reorderer runs as root and trusts nothing users write);
any trouble with it just parses the JSON.
"""

from __future__ import annotations

import marshal
import os

from msched.config import DATA_DIR, user_cache_dir
from msched.errors import ProfileError
from msched.util.light import json_loads, lru_cache

SHIPPED_FEATURES = os.path.join(DATA_DIR, "torchvision_features.json")


@lru_cache(maxsize=4)
def load_table(path: str = SHIPPED_FEATURES) -> dict:
    """The whole file: {"versions": {...}, "models": {name: profile dict}}."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        cache = os.path.join(user_cache_dir(), f"{os.path.basename(path)}.marshal")
        data = _cached(cache, raw)
        if data is None:
            data = json_loads(raw.decode())
            _cache(cache, raw, data)
        return data
    except (OSError, ValueError) as exc:          # json.JSONDecodeError is a ValueError
        raise ProfileError(f"cannot read shipped profiles {path}: {exc}") from exc


def _cached(cache: str, raw: bytes) -> dict | None:
    """The parsed table the copy holds for the file's bytes RAW, or None (no copy, another file's or
    another version's, not the user's own, damaged)."""
    try:
        with open(cache, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                return None
            version, source, data = marshal.loads(fh.read())   # not marshal.load: it reads piece by piece
        return data if version == marshal.version and source == raw and isinstance(data, dict) else None
    except Exception:  # noqa: BLE001 - a damaged copy (EOFError, ValueError, TypeError...) is only a miss
        return None


def _cache(cache: str, raw: bytes, data: dict) -> None:
    """Write the copy, atomically and owner-only; any failure leaves the table uncached."""
    from msched.util.files import write_atomically

    try:
        os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
        write_atomically(cache, marshal.dumps((marshal.version, raw, data)), mode=0o600)
    except (OSError, ValueError):
        pass


def model_names(path: str | os.PathLike | None = None) -> list[str]:
    return sorted(load_table(str(path or SHIPPED_FEATURES)).get("models", {}))


def profile_data(name: str, path: str | os.PathLike | None = None) -> dict | None:
    """One model's shipped profile (at its default input size) as a dict, None when not shipped."""
    return load_table(str(path or SHIPPED_FEATURES)).get("models", {}).get(name)
