"""Station control by VSI-S, as the Field System drives jive5ab on a FlexBuff: the protocol
(``protocol``), what each command does (``station``), the control port (``server``) and a client
(``client``). ``vdifrec serve`` runs them; ``vdifrec vsi`` and :class:`VSIClient` talk to it."""

from __future__ import annotations

from .client import VSIClient, VSIError
from .protocol import Code, Reply, parse_reply

__all__ = ["Code", "Reply", "VSIClient", "VSIError", "parse_reply"]
