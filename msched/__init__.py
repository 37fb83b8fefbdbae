"""msched: model-similarity-based scheduling of deep-learning training jobs in front of Slurm."""

__version__ = "0.1.0"
