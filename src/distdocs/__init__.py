"""distdocs: the small library shared by the distdocs examples, lab and benchmarks."""

__version__ = "0.1.0"
