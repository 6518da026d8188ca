"""The Python client of the mapi model platform.

``Client`` finds the platform and its token as the ``mapi`` CLI does, first
found wins: the arguments; ``MAPI_URL`` and ``MAPI_TOKEN``; the CLI's saved
sign-in (``$MAPI_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/mapi``, else
``~/.config/mapi``: ``credentials.json``); the file ``mapi dev`` writes for
its CLI (``$MAPI_HOME/credentials.json``, else ``./.mapi/credentials.json``).

Every refusal is a :class:`MapiError` with the API's problem code and
detail; a platform that cannot be reached is a :class:`MapiError` too, with
the cause (``connection refused``) and what to do next.
"""

from ._client import Client, Job, MapiError, Run

__all__ = ["Client", "Job", "MapiError", "Run"]
__version__ = "0.1.0"
