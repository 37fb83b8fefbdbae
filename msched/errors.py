"""Errors raised on both sides of msub's light path.

`ProfileError` is raised by the torch-side profiler (`msched.models.profiler`, with the per-user cache in
`msched.models.profile_cache`) and by the shipped-table reader (`msched.models.shipped`) that msub uses on every
submission; it lives here so that msub can catch it without importing the profiler (see
`msched.util.record` for why msub's imports are counted).
"""


class ProfileError(Exception):
    """A spec that cannot be profiled; the message is one line that says why (and what would work)."""
