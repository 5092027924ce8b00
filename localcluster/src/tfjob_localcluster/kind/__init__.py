"""A kind cluster of this checkout's images, on the machine's Docker engine or one the
project runs."""
