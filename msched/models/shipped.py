"""The shipped torchvision profile table (`msched/data/torchvision_features.json`), read as plain dicts.

scripts/build_reference_profiles.py precomputes every torchvision classification model's profile, so
naming one costs a JSON lookup: no torch, and no `msched.models.profiler`. msub reads this on every submission;
`msched.models.profile_cache` wraps the same entries in `Profile` objects for everyone else.
"""

from __future__ import annotations

import os

from msched.config import DATA_DIR
from msched.errors import ProfileError
from msched.util.light import json_load, lru_cache

SHIPPED_FEATURES = os.path.join(DATA_DIR, "torchvision_features.json")


@lru_cache(maxsize=4)
def load_table(path: str = SHIPPED_FEATURES) -> dict:
    """The whole file: {"versions": {...}, "models": {name: profile dict}}."""
    try:
        with open(path) as fh:
            return json_load(fh)
    except (OSError, ValueError) as exc:          # json.JSONDecodeError is a ValueError
        raise ProfileError(f"cannot read shipped profiles {path}: {exc}") from exc


def model_names(path: str | os.PathLike | None = None) -> list[str]:
    return sorted(load_table(str(path or SHIPPED_FEATURES)).get("models", {}))


def profile_data(name: str, path: str | os.PathLike | None = None) -> dict | None:
    """One model's shipped profile (at its default input size) as a dict, None when not shipped."""
    return load_table(str(path or SHIPPED_FEATURES)).get("models", {}).get(name)
