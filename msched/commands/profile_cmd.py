"""`msched profile SPEC`: a model's layer-by-layer profile (shipped or cached when possible)."""

from __future__ import annotations

import json
import sys

import click

from msched.models.profiler import DEFAULT_TIMEOUT_S, ProfileError


@click.command()
@click.argument("spec")
@click.option("--input-size", type=click.IntRange(min=1), default=None,
              help="Input height and width in pixels (default: the model's own, e.g. 224; inception_v3 299).")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON.")
@click.option("--timeout", type=click.FloatRange(min=1), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds allowed to import and build a model file (path/to/file.py:factory).")
@click.option("--no-cache", is_flag=True, help="Profile afresh instead of reading the per-user cache.")
def profile(spec: str, input_size: int | None, as_json: bool, timeout: float, no_cache: bool) -> None:
    """Profile SPEC: a torchvision model name or path/to/file.py:factory.

    Counts per layer type, depth, parameters, forward FLOPs per sample and activation bytes, from a
    build on PyTorch's meta device (no weights). A torchvision model at its default input size is
    answered from the shipped table without importing torch.
    """
    from msched.models.profile_cache import get_profile

    try:
        prof = get_profile(spec, input_size=input_size, timeout=timeout, use_cache=not no_cache)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        data = prof.to_dict()
        data["macs"] = prof.flops / 2
        data["conv2d"] = prof.conv2d
        click.echo(json.dumps(data, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(f"[bold]{prof.spec}[/bold] at {prof.input_size}x{prof.input_size}: "
                  f"{prof.flops / 1e9:.3f} GFLOPs ({prof.flops / 2e9:.3f} GMACs) per sample, "
                  f"{prof.params:,} parameters, {prof.conv2d} Conv2d, depth {prof.depth}, "
                  f"activations {prof.activation_bytes / 2**20:.1f} MiB per sample")
    table = Table(title="layers")
    table.add_column("kind")
    table.add_column("count", justify="right")
    table.add_column("GFLOPs", justify="right")
    table.add_column("share", justify="right")
    kinds = sorted(set(prof.counts) | set(prof.flops_by_kind))
    for kind in kinds:
        fl = prof.flops_by_kind.get(kind)
        table.add_row(kind, str(prof.counts.get(kind, "")), f"{fl / 1e9:.3f}" if fl is not None else "",
                      f"{fl / prof.flops:.1%}" if fl is not None and prof.flops else "")
    for op, n in prof.ops.items():
        table.add_row(f"({op})", str(n), "", "")
    console.print(table)
