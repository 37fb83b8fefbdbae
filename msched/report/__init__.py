"""`msched report`: what the scheduler did and how well its estimates held.

`data` turns the database (and, optionally, Slurm's live queue) into small frozen dataclasses; `terminal`
and `html` only render them. Keeping the queries apart from the rendering lets the JSON output, the
terminal tables and the HTML page show exactly the same figures.
"""
