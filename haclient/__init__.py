"""haclient: a failover-aware, JMS-style messaging client for AMQP 1.0 brokers.

The blocking JMS-style API is re-exported here as it lands; today the package offers the
exception tree (``haclient.errors``) and the AMQP engine (``haclient.amqp``).
"""

from __future__ import annotations

from haclient.errors import *  # noqa: F403  (the error tree is part of the public API)
from haclient.errors import __all__ as _errors_all

__version__ = "0.1.0"

__all__ = [*_errors_all, "__version__"]
