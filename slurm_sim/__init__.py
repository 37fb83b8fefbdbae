"""slurm_sim: a discrete-event simulator of a Slurm cluster with typed GPUs, behind msched's SlurmClient interface."""
