"""trio-agents from a plain script: no event loop of your own, no ``async`` -- ``actors.sync``.

Run: ``python examples/script_sync.py``

The runtime runs in a thread of its own and every call waits for its answer, so the script reads
top to bottom. It is the same runtime as ``open_runtime()``: a run is still one cancel scope, and
a run that is cut still commits what it produced. Press Ctrl-C while it counts: the run in
flight is cut, its partial is kept, and ``KeyboardInterrupt`` is raised as usual.

The agents answer from the offline simulator. To ask a real model, give ``runtime.agent`` a
provider string instead, such as ``"openai:gpt-4.1-mini"`` (it reads ``$OPENAI_API_KEY``; see
docs/models.md).
"""

from __future__ import annotations

import actors.sync
from actors import tool
from actors.durable import AgentRegistry, MemoryRunStore
from protocols.jobs import AgentJob


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main() -> None:
    with actors.sync.Runtime() as runtime:
        simulator = runtime.simulator(interval=0.005)  # a model server on 127.0.0.1
        agent = runtime.agent(simulator.openai(), system="Be terse.", tools=[add])

        # One call, one answer: the model calls the tool, then answers from its result.
        result = agent.generate("What is 19 + 23?")
        print(result.content, f"({result.turns} turns)")  # -> The answer is 42. (2 turns)

        # A stream is a generator of chunks.
        for chunk in agent.stream("Count to 5."):
            if chunk.kind == "content":
                print(chunk.text, end="", flush=True)  # -> 1 2 3 4 5
        print()

        # Leaving the loop early cuts the run; what it produced is committed, marked interrupted.
        for chunk in agent.stream("Count to 1000."):
            if chunk.text.strip() == "3":
                break
        last = agent.messages()[-1]
        print(last.interrupted, last.content.startswith("1 2 3"))  # -> True True

        # Durable jobs, from the same script: a worker runs them in the runtime's thread.
        registry = AgentRegistry()
        registry.add("calculator", simulator.openai(), tools=[add])
        with runtime.open_job_queue(MemoryRunStore(), registry) as queue:
            id = queue.enqueue(AgentJob.ask("calculator", "What is 2 + 3?"))
            print(queue.result(id).content)  # -> The answer is 5.


if __name__ == "__main__":
    main()
