"""GraphMend: find and fix TorchDynamo graph breaks.

Importing this package does not import torch; the engine verbs import it when they run.
The public surface is the dataclasses of ``graphmend.model`` and the functions below.
"""

__version__ = "0.1.0"

from graphmend.model import (  # noqa: E402
    Category,
    CheckReport,
    Decline,
    Edit,
    Fix,
    GraphBreak,
    Safety,
    TargetResult,
)

__all__ = ["__version__", "Category", "CheckReport", "Decline", "Edit", "Fix", "GraphBreak", "Safety", "TargetResult"]
