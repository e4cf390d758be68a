"""What a module of an extra raises when the extra is not installed."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(module: str, extra: str, cause: ModuleNotFoundError) -> ImportError:
    """An ``ImportError`` that names the missing package and the extra that installs it.

    Args:
        module: The haclient module that cannot be imported (``haclient.metrics``).
        extra: The extra that installs what it needs (``metrics``).
        cause: The import that failed.
    """
    return ImportError(
        f"{module} needs {cause.name}, which the '{extra}' extra installs: "
        f"pip install 'haclient[{extra}]'",
        name=module,
    )
