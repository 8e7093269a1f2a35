"""The original harnessx's ``harnessx.recorder``: the flight recorder."""

from __future__ import annotations

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
    "BundleLimits",
    "ExportPolicy",
    "IncidentError",
    "IncidentRecorder",
    "Playback",
    "RecordingError",
    "VerificationReport",
    "export_incident",
]
