"""An example that supports exactly two ranks, for testing the runtime's world-size check."""

from distdocs.runtime import distributed, print0

with distributed(world_size=2):
    print0("running on 2 ranks")
