"""What a scientist checks in a recording, the face of the engine's ``src/analysis/``, one module
per module of the core: ``spectrum`` (autospectra, as m5spec), ``tones`` (test tones and
phase-cal lines), ``bstate`` (bit-state statistics, as m5bstate), ``fringe`` (the fringe between
two streams) and ``check`` (the whole-file integrity check); ``inputs`` is what every check
accepts and ``plot`` draws them.

The checks are public at the top of the package (``vdifrec.spectrum``, ``vdifrec.Spectrum``,
``vdifrec.check``, ...). Here each stays in its module, so that ``vdifrec.analysis.spectrum`` is
the module and not the function of the same name.

The checks take a :class:`vdifrec.Reader` (read in chunks from its current position, which is
left unchanged), a ``(n, frame_size)`` uint8 array of whole frames (a live view from a Recorder,
or ``reader.frames``), or a float/complex sample array shaped ``(time,)``, ``(time, channel)``
or ``(time, thread, channel)``. The FFTs run in Rust, in chunks, on all CPUs, with the GIL
released.
"""
