"""The VSI-S commands, one module per family, each handler a function of the station and the
command that returns the reply: ``identity`` (who and what the station is), ``configure`` (what it
receives and where it writes), ``recording`` (scans recorded and what they count), ``scans``
(a recorded scan chosen, checked and copied out) and ``forwarding`` (the stream sent on live,
``mem2net`` and ``ipd``). ``vsi.station`` maps each keyword to its
handler."""
