"""The protocols the relay serves besides its own, sans-IO: each reads a client's request into
validated values and writes a run's events (:class:`~protocols.live.RunEvent`) as that
protocol's events -- AG-UI (:mod:`.agui`), the AI SDK's UI message stream (:mod:`.ui_stream`),
OpenAI's chat completions (:mod:`.openai_chat`) and A2A (:mod:`.a2a`)."""
