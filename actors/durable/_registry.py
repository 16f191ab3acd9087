"""``AgentRegistry``: the names a job may give, and the live pieces each stands for."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from protocols.authority import Authority
from protocols.errors import ConfigError
from protocols.settings import ModelSettings, SettingsLike

from ..providers import provider_from_string
from ..tools import CallableTool, ToolRegistry

if TYPE_CHECKING:
    from ..providers import ProviderInterface

__all__ = ["AgentRegistry", "AgentSpec"]


def _tools(value: Iterable[CallableTool] | ToolRegistry) -> tuple[CallableTool, ...]:
    return value.tools() if isinstance(value, ToolRegistry) else tuple(value)


@attrs.frozen
class AgentSpec:
    """How to make the agent a job names: its ``provider`` (shared by every job: a
    :class:`~actors.providers.ProviderConnection` is a good one), ``system`` prompt, ``tools``,
    ``authority`` and any other :meth:`Agent.start <actors.agent.Agent.start>` keyword in
    ``options`` (``limit``, ``timeout``, ``budget``, ``settings``, ``instructions``, ...). A
    job's own limit, timeout and budget win over these, and its settings override these field
    by field."""

    provider: ProviderInterface
    system: str | None = None
    tools: tuple[CallableTool, ...] = attrs.field(default=(), converter=_tools)
    authority: Authority | None = None
    options: dict[str, Any] = attrs.field(factory=dict)

    def idempotent(self, name: str) -> bool:
        """Whether the tool called ``name`` is marked idempotent."""
        return any(
            tool.definition.name == name and getattr(tool, "idempotent", False) is True
            for tool in self.tools
        )


class AgentRegistry:
    """Names to :class:`AgentSpec`: what the workers of a job queue can run.

    ``registry.add("writer", provider, system=..., tools=[...], limit=6)``; a job names
    ``"writer"``. A name a job gives that is not here abandons the job with ``unknown agent:
    NAME`` (it is never retried: no worker of this registry could run it)."""

    def __init__(self, agents: dict[str, AgentSpec] | None = None) -> None:
        self._agents: dict[str, AgentSpec] = {}
        for name, spec in (agents or {}).items():
            self._put(name, spec)

    def _put(self, name: str, spec: AgentSpec) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"an agent's name must be a non-empty string, not {name!r}")
        if name in self._agents:
            raise ConfigError(f"an agent named {name!r} is already registered")
        if not isinstance(spec, AgentSpec):
            raise ConfigError(f"register an AgentSpec, not {type(spec).__name__}")
        self._agents[name] = spec

    def add(
        self,
        name: str,
        provider: ProviderInterface | str,
        *,
        system: str | None = None,
        tools: Iterable[CallableTool] | ToolRegistry = (),
        authority: Authority | None = None,
        settings: SettingsLike = None,
        **options: Any,
    ) -> AgentSpec:
        """Register ``name``; returns its spec. A provider string (``"openai:gpt-4.1-mini"``)
        is built into its adapter here, from the environment (see
        :func:`~actors.providers.provider_from_string`), and shared by every job of the spec.
        ``settings`` are the model's :class:`~protocols.settings.ModelSettings` (or a mapping of
        their fields), checked now (a job's own settings override them field by field);
        ``options`` are further ``Agent.start`` keywords."""
        if isinstance(provider, str):
            provider = provider_from_string(provider)
        if settings is not None:
            options["settings"] = ModelSettings.of(settings)
        spec = AgentSpec(provider, system, _tools(tools), authority, dict(options))
        self._put(name, spec)
        return spec

    def get(self, name: str) -> AgentSpec:
        """The spec of ``name``; :class:`~protocols.errors.ConfigError` ``unknown agent: NAME``
        when there is none."""
        spec = self._agents.get(name)
        if spec is None:
            known = ", ".join(sorted(self._agents)) or "none"
            raise ConfigError(f"unknown agent: {name} (registered: {known})")
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._agents))

    def __len__(self) -> int:
        return len(self._agents)
