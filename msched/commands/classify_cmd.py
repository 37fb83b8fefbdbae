"""`msched classify SPEC`: the model's similarity group, nearest reference and runners-up."""

from __future__ import annotations

import json

import click

from msched.config import METRICS, ConfigError


@click.command()
@click.argument("spec")
@click.option("--references", "references", metavar="NAMES|FILE", default=None,
              help="Reference set: comma-separated torchvision names (profiled on demand) or a JSON file "
                   "(default: the site's, msched/data/reference_models.json).")
@click.option("--metric", type=click.Choice(METRICS), default=None,
              help="Similarity measure (default: the site's, cosine).")
@click.option("--input-size", type=click.IntRange(min=1), default=None, help="Input size in pixels.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (group, nearest_reference, similarity, candidates).")
def classify(spec: str, references: str | None, metric: str | None, input_size: int | None, as_json: bool) -> None:
    """Classify SPEC (a torchvision name or path/to/file.py:factory) against the reference set."""
    from msched.config import load_config
    from msched.models.classify import ClassifyError
    from msched.models.classify import classify as run_classify

    try:
        config = load_config()
        cls = run_classify(spec, config=config, references=references, metric=metric, input_size=input_size)
    except (ClassifyError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        data = cls.to_dict()
        data["candidates"] = [list(c) for c in cls.candidates[1:3]]
        data["ranking"] = [list(c) for c in cls.candidates]
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{cls.spec}: group {cls.group}")
    click.echo(f"  nearest reference  {cls.nearest_reference} (similarity {cls.similarity:.3f}, "
               f"FLOPs ratio {cls.flops_ratio:.3g})")
    if cls.perf_reference != cls.nearest_reference:
        click.echo(f"  estimates from     {cls.perf_reference} (nearest with measured performance, "
                   f"FLOPs ratio {cls.perf_flops_ratio:.3g})")
    for name, sim in cls.candidates[1:3]:
        click.echo(f"  next               {name} (similarity {sim:.3f})")
