"""Testing kit: servers and providers that run everything offline, for tests, demos and benchmarks.

Public and documented; nothing here is needed at run time in production.
"""

from ._fault import FaultProviderServer as FaultProviderServer
from ._scripted import Fail as Fail
from ._scripted import Hang as Hang
from ._scripted import Reply as Reply
from ._scripted import ScriptedCall as ScriptedCall
from ._scripted import ScriptedProvider as ScriptedProvider
from ._scripted import ScriptExhausted as ScriptExhausted
from ._simulator import Simulator as Simulator
from ._simulator import SimulatorStatistics as SimulatorStatistics

__all__ = [
    "Fail",
    "FaultProviderServer",
    "Hang",
    "Reply",
    "ScriptExhausted",
    "ScriptedCall",
    "ScriptedProvider",
    "Simulator",
    "SimulatorStatistics",
]
