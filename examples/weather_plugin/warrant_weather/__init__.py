"""An example warrant plug-in: weather forecasts and confirmed messages over HTTP.

Installed, it registers ``plugin`` under the entry-point group ``warrant.tools`` (see this
distribution's ``pyproject.toml``); not installed, name it with
``WARRANT_TOOLS=warrant_weather:plugin``. Workers that run its tools need
``WEATHER_SERVICE_URL`` in their environment.
"""

from __future__ import annotations

from warrant.tools import DepsContext, Plugin
from warrant_weather.client import URL_SECRET, WeatherClient
from warrant_weather.tools import GET_WEATHER, SEND_MESSAGE

__all__ = ["WeatherClient", "deps", "plugin"]


def deps(ctx: DepsContext) -> WeatherClient:
    """Once per worker process, the first time one of these tools runs. The worker closes it
    at shutdown (it has ``close()``)."""
    return WeatherClient(ctx.secret(URL_SECRET))


plugin = Plugin(name="weather", tools=(GET_WEATHER, SEND_MESSAGE), deps=deps)
