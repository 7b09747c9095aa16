"""Zero-copy views of the recorder's ring, and the check that analyses make of them.

A view yields to the recording by default: it pins nothing, and when the capture needs its
slots it takes them. The engine counts, in O(1), how many of a view's frames the capture has
taken back since the view was made (``stale_frames``). The analysis functions check a view
before and after they read it and raise ``StaleViewError`` if any frame changed under them,
so a result is never computed from frames half overwritten.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import numpy as np

from . import _core

__all__ = ["RingFrames", "ring_owner", "checks_views"]

P = ParamSpec("P")
R = TypeVar("R")


def ring_owner(x: Any) -> _core.RingView | None:
    """The ring view an array shows (through slices and ``np.asarray``), or None for other data."""
    seen = 0
    while x is not None and seen < 64:
        if isinstance(x, _core.RingView):
            return x
        x = getattr(x, "base", None)
        seen += 1
    return None


class RingFrames(np.ndarray):
    """Frames of the ring, ``(n, frame_size)`` uint8, read-only, zero-copy.

    An ordinary NumPy array (every analysis takes it) that also says whether its frames are
    still the ones it was made of: ``valid`` and ``stale_frames``.
    """

    @property
    def _owner(self) -> _core.RingView:
        owner = ring_owner(self)
        if owner is None:  # a copy: no longer a view of the ring
            raise AttributeError("this array is a copy, not a view of the ring")
        return owner

    @property
    def stale_frames(self) -> int:
        """Frames of the view the capture has overwritten (or is writing) since it was made."""
        return int(self._owner.stale_frames)

    @property
    def valid(self) -> bool:
        """True while every frame of the view is still the one it was made of."""
        return self.stale_frames == 0

    @property
    def held(self) -> bool:
        """Whether the frames are pinned (``hold=True``): the capture then drops new frames rather than overwrite them."""
        return bool(self._owner.pinned)

    @property
    def first_frame(self) -> int:
        """Number of the view's first frame (arrival order since the recording started)."""
        return int(self._owner.first)


def frames_of(owner: _core.RingView) -> RingFrames:
    return owner.array().view(RingFrames)


def checks_views(what: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Makes an analysis raise ``StaleViewError`` when a ring view it is given is stale,
    before it starts or (frames overwritten while it read them) when it ends."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            owners = [o for a in (*args, *kwargs.values()) if (o := ring_owner(a)) is not None]
            for o in owners:
                o.check_fresh(what)
            result = fn(*args, **kwargs)
            for o in owners:
                o.check_fresh(what)
            return result

        return checked

    return wrap
