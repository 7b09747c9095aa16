"""Station control by VSI-S, as the Field System drives jive5ab on a FlexBuff: the protocol
(``protocol``), the station's state and its dispatch (``station``), what each command does (one
family of commands per module of ``commands``, sharing ``common``), the control port
(``server``) and a client (``client``). ``vdifrec serve`` runs them; ``vdifrec vsi`` and
:class:`VSIClient` talk to it."""

from __future__ import annotations

from .client import VSIClient, VSIError
from .protocol import Code, Reply, parse_reply

__all__ = ["Code", "Reply", "VSIClient", "VSIError", "parse_reply"]
