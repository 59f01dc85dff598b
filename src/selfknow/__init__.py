"""selfknow: measuring how well language models know what they know."""

__version__ = "0.1.0"
