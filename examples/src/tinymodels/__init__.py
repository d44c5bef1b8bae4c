"""A tiny transformer-style model package with the graph breaks real models have."""
