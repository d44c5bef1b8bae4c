"""A local GitHub REST API server for tests (see ``server.py``)."""

from tests.github_server.server import GitHubServer, file_patches

__all__ = ["GitHubServer", "file_patches"]
