"""Running an observation from its VEX schedule (``vdifrec observe``, :func:`vdifrec.observe`).

- :mod:`~vdifrec.observing.checks`: the arriving stream against the schedule's mode, and its
  VDIF time against the host clock;
- :mod:`~vdifrec.observing.results`: what became of each scan, and of the session;
- :mod:`~vdifrec.observing.shipping`: each finished scan pushed while the next records;
- :mod:`~vdifrec.observing.session`: the session itself: scans queued into the recorder by
  their windows, so that scans back to back lose no frame between them.
"""

from __future__ import annotations

from .results import ScanResult, SessionSummary
from .session import observe

__all__ = ["ScanResult", "SessionSummary", "observe"]
