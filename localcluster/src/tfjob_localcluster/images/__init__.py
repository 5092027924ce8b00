"""The images the clusters run: built here from the project's Dockerfiles on a base made
here, kept as tars, served by a registry on the host's loopback."""
