"""Click commands of `msched`, one module per command, imported lazily by msched.cli."""
