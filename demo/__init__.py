"""`make demo`: raywatch on a laptop, watching a Ray Tune search that goes wrong."""
