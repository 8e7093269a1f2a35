"""The original harnessx's ``harnessx.recorder``: the flight recorder.

It also offers what 0.9.1's module imported from elsewhere, which programs import from it too.
"""

from __future__ import annotations

from harnessx._bundle import FORMAT, VERSION
from harnessx._errors import HarnessError
from harnessx._events import RunEvent
from harnessx._journal import RecordingError
from harnessx._recorder import (
    BundleLimits,
    ExportPolicy,
    IncidentError,
    IncidentRecorder,
    Playback,
    VerificationReport,
    export_incident,
)

__all__ = [
    "FORMAT",
    "VERSION",
    "BundleLimits",
    "ExportPolicy",
    "HarnessError",
    "IncidentError",
    "IncidentRecorder",
    "Playback",
    "RecordingError",
    "RunEvent",
    "VerificationReport",
    "export_incident",
]
