"""Where profiles come from without building a model: the shipped table, then a per-user cache.

A torchvision model name is answered from the shipped table (`msched.models.shipped`, precomputed by
scripts/build_reference_profiles.py), so naming one never imports torch; msub reads that table directly
(as plain dicts) and comes here only for a user's own model. A user's own model (`path/to/file.py:factory`) is profiled once in a subprocess and cached per user,
keyed by absolute path, the file's SHA-256, the factory, the input size, the library versions (read
from package metadata, not by importing them) and the profile format's PROFILE_VERSION: editing the file,
upgrading torch or a profiler that records more re-profiles it.
Pure Python: this module must not import torch, numpy or scikit-learn.

Trust: a model file is imported only when it and its directory belong to the calling user and no
other user can write to either (`untrusted_reason`); anything else raises UntrustedModelError before
any of its code runs. (msub adds its own rule on top: as root it runs no model code at all.)
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from msched.config import user_cache_dir
from msched.errors import ProfileError
from msched.models.profiler import (
    DEFAULT_TIMEOUT_S,
    PROFILE_VERSION,
    Profile,
    library_versions,
    parse_spec,
    profile_in_process,
    profile_subprocess,
    unknown_name_error,
)
from msched.models.shipped import SHIPPED_FEATURES, load_table, model_names, profile_data
from msched.util.files import write_atomically


class UntrustedModelError(ProfileError):
    """A model file whose code the calling user must not run (another user's, or writable by others)."""


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return f"uid {uid}"


def untrusted_reason(model_path: str, uid: int | None = None) -> str | None:
    """Why running MODEL_PATH's code as UID (default: this process) would run someone else's code, or None.

    The file and the directory it is imported from (it goes first on the child's sys.path, so every
    module there can be imported by it) must belong to UID and be writable by no one else. A missing
    file is not untrusted: the profiler reports it as missing.
    """
    uid = os.geteuid() if uid is None else uid
    for path, what in ((model_path, "file"), (os.path.dirname(model_path) or ".", "directory")):
        try:
            st = os.stat(path)
        except OSError:
            return None
        if st.st_uid != uid:
            return f"model {what} {path} belongs to {_user_name(st.st_uid)}, not to {_user_name(uid)}"
        if st.st_mode & 0o022:
            return f"model {what} {path} is writable by other users"
    return None


def cache_dir() -> Path:
    """The calling user's profile cache (`profiles` in msched.config.user_cache_dir)."""
    return Path(user_cache_dir()) / "profiles"


def shipped_profiles(path: str | os.PathLike | None = None) -> dict[str, Profile]:
    """All shipped torchvision profiles by model name (at each model's own default input size)."""
    data = load_table(str(path or SHIPPED_FEATURES))
    return {name: Profile.from_dict(p) for name, p in data.get("models", {}).items()}


def shipped_profile(name: str, path: str | os.PathLike | None = None) -> Profile | None:
    raw = profile_data(name, path)
    return Profile.from_dict(raw) if raw else None


def _file_key(model_path: str, factory: str, input_size: int | None) -> str:
    try:
        digest = hashlib.sha256(Path(model_path).read_bytes()).hexdigest()
    except OSError as exc:
        raise ProfileError(f"{model_path}: cannot read: {exc.strerror}") from exc
    versions = library_versions()
    material = json.dumps([model_path, digest, factory, input_size, versions, PROFILE_VERSION], sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def _cache_read(key: str) -> Profile | None:
    p = cache_dir() / f"{key}.json"
    try:
        with open(p) as fh:
            return Profile.from_dict(json.load(fh))
    except (OSError, json.JSONDecodeError, TypeError):
        return None


def _cache_write(key: str, prof: Profile) -> None:
    """Write atomically with owner-only permissions; a cache that cannot be written is no error."""
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(d / f"{key}.json", json.dumps(prof.to_dict()), mode=0o600)
    except OSError:
        pass


def get_profile(spec: str, *, input_size: int | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                use_cache: bool = True) -> Profile:
    """The profile of SPEC, as cheaply as possible.

    torchvision name at its default size: the shipped table (no torch). Other sizes: the user cache,
    else an in-process build (torch, but no user code). `file.py:factory`: the user cache, else a
    subprocess with `timeout` and memory/CPU limits, if the file passes `untrusted_reason` (else
UntrustedModelError). Raises ProfileError with a one-line message.
    """
    names = model_names()
    ms = parse_spec(spec)
    if not ms.is_file:
        shipped = shipped_profile(ms.name)
        if shipped is None:
            # only a torchvision other than the one the table was built with can know more names
            built_with = load_table().get("versions", {}).get("torchvision")
            if built_with and built_with == library_versions().get("torchvision"):
                raise unknown_name_error(ms.name, names)
            from msched.models.profiler import torchvision_names

            if ms.name not in torchvision_names():
                raise unknown_name_error(ms.name, names)
        elif input_size in (None, shipped.input_size):
            return shipped
        key = hashlib.sha256(json.dumps([ms.name, input_size, library_versions(), PROFILE_VERSION]).encode()).hexdigest()
        cached = _cache_read(key) if use_cache else None
        if cached is not None:
            return cached
        prof = profile_in_process(ms.name, input_size)
        if use_cache:
            _cache_write(key, prof)
        return prof
    reason = untrusted_reason(ms.path)
    if reason:
        raise UntrustedModelError(f"{reason}: not running its code")
    key = _file_key(ms.path, ms.factory, input_size)
    cached = _cache_read(key) if use_cache else None
    if cached is not None:
        return cached
    prof = profile_subprocess(f"{ms.path}:{ms.factory}", input_size, timeout=timeout)
    if use_cache:
        _cache_write(key, prof)
    return prof
