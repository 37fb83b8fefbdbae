"""The command-line Slurm backend (sbatch, squeue, sinfo, scontrol, scancel), in four parts:
`parsers` (squeue/sinfo output, error messages), `accounting` (finished jobs: sacct, the jobcomp file),
`writes` (batched scontrol updates) and `client` (CliClient, which runs the commands)."""

from __future__ import annotations

from msched.msub.sbatch_args import parse_time_limit
from msched.slurm.base import expand_hostlist
from msched.slurm.cli.accounting import (
    SACCT_STATES,
    parse_jobcomp,
    parse_sacct,
    parse_tres_gpus,
    read_jobcomp_tail,
)
from msched.slurm.cli.client import CliClient
from msched.slurm.cli.parsers import (
    NODE_FIELDS,
    SEP,
    classify_error,
    format_time_limit,
    normalise_node_state,
    parse_gpu_tres,
    parse_sinfo,
    parse_squeue,
)
from msched.slurm.cli.writes import parse_scontrol_errors, scontrol_update_line

__all__ = ["CliClient", "parse_squeue", "parse_sinfo", "parse_jobcomp", "parse_gpu_tres",
           "parse_time_limit", "expand_hostlist", "format_time_limit", "read_jobcomp_tail", "classify_error",
           "parse_sacct", "parse_tres_gpus", "parse_scontrol_errors", "scontrol_update_line",
           "normalise_node_state", "SEP", "NODE_FIELDS", "SACCT_STATES"]
