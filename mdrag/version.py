"""mdrag's release: imported by the modules that record or report it, without importing the package's API.

The distribution (what ``pip install`` names) is ``mdrag-docs``; the import name and the command stay
``mdrag``. Messages that name an install command read :data:`DISTRIBUTION`, so the name is written once
(``pyproject.toml``'s ``[project] name`` must equal it: ``tests/test_release.py``).
"""

__version__ = "0.2.0"
#: The name on the package index: ``pip install mdrag-docs``. The index's ``mdrag`` is another project.
DISTRIBUTION = "mdrag-docs"


def install_target(extra: str | None = None) -> str:
    """What an install command names: ``mdrag-docs``, or ``'mdrag-docs[milvus]'`` (quoted for the shell)."""
    return f"'{DISTRIBUTION}[{extra}]'" if extra else DISTRIBUTION
